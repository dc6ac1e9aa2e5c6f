"""From converted records to tf.data elements: element specs, shapes, batches.

A datapoint is the (value, label) structure of numpy leaves that
:func:`transforms.ops.leaves.datapoint` makes of a record (a dict for ``SelectDict`` / lists
of ops, a tuple for ``SelectList``); this module gives its ``tf.TensorSpec`` structure
(``spec_of``, the original API's ``output_shapes`` / ``output_types`` overriding what an element
shows), fits elements to a spec and stacks them into batches.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from transforms.ops.base import OpError

# -- element specs ----------------------------------------------------------------------


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


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


@dataclasses.dataclass(frozen=True)
class LeafSpec:
    """One ``tf.TensorSpec`` as plain Python (what :func:`fit` needs): an element stage
    holding these pickles into a worker process that never imports TensorFlow."""

    dtype: str  # TensorFlow's dtype name: "string", "uint8", ...
    numpy: Optional[np.dtype]  # None for strings
    shape: Optional[Tuple[Optional[int], ...]]  # None: any rank

    def fits(self, shape: Tuple[int, ...]) -> bool:
        return self.shape is None or (
            len(shape) == len(self.shape)
            and all(d is None or d == n for d, n in zip(self.shape, shape))
        )

    def shape_text(self) -> str:
        if self.shape is None:
            return "<unknown>"
        dims = ", ".join("None" if d is None else str(d) for d in self.shape)
        return f"({dims},)" if len(self.shape) == 1 else f"({dims})"


def plain_spec(spec: Any) -> Any:
    """An element spec (``tf.TensorSpec`` leaves in dicts and tuples) with
    :class:`LeafSpec` leaves."""
    if isinstance(spec, dict):
        return {k: plain_spec(v) for k, v in spec.items()}
    if isinstance(spec, tuple):
        return tuple(plain_spec(v) for v in spec)
    if isinstance(spec, LeafSpec):
        return spec
    name = spec.dtype.name
    shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
    return LeafSpec(name, None if name == "string" else np.dtype(spec.dtype.as_numpy_dtype), shape)


def fit(element: Any, spec: Any, strict: bool = False) -> Any:
    """Cast an element's leaves to the spec (:class:`LeafSpec` leaves, see
    :func:`plain_spec`); raise OpError if a shape does not fit.  A uint8 array (an
    image) under a float spec is scaled to [0, 1] as ``tf.image.convert_image_dtype``
    scales it, as the record parsers read stored uint8 pixels; other dtypes are cast."""
    if isinstance(spec, dict):
        return {k: fit(element[k], spec[k], strict) for k in spec}
    if isinstance(spec, tuple):
        return tuple(fit(e, s, strict) for e, s in zip(element, spec))
    if spec.numpy is None:  # tf.string: bytes; a number or text asked for as a string is its text
        arr = np.asarray(element)
        if arr.dtype.kind in "biufU":
            # each element's own text: a float32 0.2 is b"0.2" (np.vectorize would hand str
            # Python floats, widened: b"0.20000000298023224"), a bool b"True", an int its digits
            arr = np.array([str(v).encode() for v in arr.reshape(-1)] or [], dtype=object).reshape(
                arr.shape
            )
        else:
            arr = np.asarray(element, dtype=object)
    else:
        arr = np.asarray(element)
        if arr.dtype.kind in "SO":
            raise OpError(f"value {str(element)[:40]} is not {spec.dtype}")
        if arr.dtype == np.uint8 and spec.numpy.kind == "f":
            # pixels asked for as floats: scaled to [0, 1] as tf.image.convert_image_dtype
            # (what make_record_parser gives for the same load written with path=)
            from transforms.ops.images import convert_dtype

            arr = convert_dtype(arr, spec.numpy)
        else:
            if arr.dtype.kind == "f" and spec.numpy.kind in "iu":
                # nan and inf have no integer: a reject, never numpy's cast to -2**31.  With
                # dtypes inferred from the first element (``strict``), a value must be
                # whole, as when the same load is written to files
                # (transforms.tfrecord.example); floats asked for as integers
                # (output_types) are cast, as tf.data casts them
                with np.errstate(invalid="ignore"):
                    whole = not strict or np.all(np.equal(np.mod(arr, 1), 0))
                    if not (np.all(np.isfinite(arr)) and whole):
                        raise OpError(
                            f"value {str(element)[:40]} is not {spec.dtype} (no whole finite number)"
                        )
            arr = arr.astype(
                spec.numpy, copy=False
            )  # any other dtype: a cast (as from_generator's)
    if not spec.fits(arr.shape):
        raise OpError(f"shape {tuple(arr.shape)} does not fit the output shape {spec.shape_text()}")
    return arr
