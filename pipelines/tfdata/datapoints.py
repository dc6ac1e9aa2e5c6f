"""From converted records to tf.data elements: element specs, shapes, batches.

A datapoint is the (value, label) structure of numpy leaves that
:func:`transforms.ops.leaves.datapoint` makes of a record (a dict for ``SelectDict`` / lists
of ops, a tuple for ``SelectList``); this module gives its ``tf.TensorSpec`` structure
(``spec_of``, the original API's ``output_shapes`` / ``output_types`` overriding what an element
shows) and stacks elements of a fixed-shape spec into batches.  The TensorFlow-free part,
a spec as plain Python and values fitted to it, is :mod:`transforms.ops.element_spec`.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

# -- element specs ----------------------------------------------------------------------


def spec_of(element: Any, shapes: Any = None, types: Any = None):
    """``tf.TensorSpec`` structure of an element; ``shapes``/``types`` (the original API's
    ``output_shapes``/``output_types``) override what the element shows."""
    import tensorflow as tf

    def one(v, shape, dtype):
        if dtype is None:
            arr = np.asarray(v)
            dtype = tf.string if arr.dtype.kind in "SOU" else tf.as_dtype(arr.dtype)
        if shape is None:
            shape = np.shape(v)
        return tf.TensorSpec(tf.TensorShape(shape), tf.as_dtype(dtype))

    return _zip_struct(element, shapes, types, one)


def fixed_shapes(spec) -> bool:
    """Whether every tensor of an element spec has a fully known shape with at least one
    value: elements of such a spec can cross into tf.data in stacked batches.  A zero-size
    component (an empty JSON list) cannot: ``unbatch`` of a ``from_generator`` batch with
    a zero-size component crashes the process (segmentation fault, TensorFlow 2.x)."""
    import tensorflow as tf

    return all(
        s.shape.is_fully_defined() and s.shape.num_elements() > 0 for s in tf.nest.flatten(spec)
    )


def batched_spec(spec):
    """``spec`` with a leading batch dimension of unknown size."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda s: tf.TensorSpec([None] + s.shape.as_list(), s.dtype), spec)


def stacked(elements: Iterator[Any], spec, size: int) -> Iterator[Any]:
    """Elements of a fixed-shape ``spec`` stacked ``size`` at a time (the last batch may be
    shorter), each component as ``spec`` types it.  The elements fit ``spec``: the element
    stage rejects a record whose shapes do not."""
    import tensorflow as tf

    flat = tf.nest.flatten(spec)
    dtypes = [object if s.dtype == tf.string else s.dtype.as_numpy_dtype for s in flat]
    shapes = [tuple(s.shape.as_list()) for s in flat]

    def pack(rows):
        cols = []
        for i, (dt, shape) in enumerate(zip(dtypes, shapes)):
            col = [r[i] for r in rows]
            if dt is object:
                arr = np.empty((len(col),) + shape, dtype=object)  # of bytes, as tf.string takes
                for j, v in enumerate(col):
                    arr[j] = (
                        np.asarray(v, dtype=object) if shape else np.asarray(v, dtype=object).item()
                    )
                cols.append(arr)
            else:
                cols.append(np.asarray(np.stack(col), dtype=dt))
        return tf.nest.pack_sequence_as(spec, cols)

    rows = []
    for el in elements:
        rows.append(tf.nest.flatten(el))
        if len(rows) == size:
            yield pack(rows)
            rows = []
    if rows:
        yield pack(rows)


def _zip_struct(el, shapes, types, fn):
    if isinstance(el, dict):
        return {k: _zip_struct(el[k], _pick(shapes, k), _pick(types, k), fn) for k in el}
    if isinstance(el, tuple):
        return tuple(
            _zip_struct(e, _pick(shapes, i), _pick(types, i), fn) for i, e in enumerate(el)
        )
    return fn(el, shapes, types)


def _pick(x, k):
    if x is None:
        return None
    if isinstance(x, dict):
        return x.get(k)
    if isinstance(x, (list, tuple)) and not _is_shape(x):
        return x[k] if isinstance(k, int) and k < len(x) else None
    return None


def _is_shape(x) -> bool:
    return all(d is None or isinstance(d, (int, np.integer)) for d in x)
