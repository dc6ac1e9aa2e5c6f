"""A remote in-memory load's records, parsed as stored, cast to the dtypes asked for.

``Dataset.load(..., remote_exec=True)`` reads back the TFRecords its Beam job wrote.
:func:`pipelines.tfdata.parsers.make_record_parser` reads raw bytes only as the dtype they were
stored as (casting in the parser would double its time per record: ``docs/benchmarks.md``),
so the load parses with :func:`stored_spec` -- the requested structure and
shapes, the first record's stored dtypes -- and, only where ``output_types`` /
``output_signature`` ask for another dtype, casts the parsed element with
:func:`caster`.  The cast gives the in-memory load's values
(:func:`transforms.ops.element_spec.fit`), leaf by leaf:

* uint8 under a float dtype: ``tf.image.convert_image_dtype`` (scaled to [0, 1]), as
  ``fit`` scales pixels;
* a number or bool asked for as ``tf.string``: its text, as ``fit`` writes it.
  Integers through ``tf.strings.as_string`` (the same digits as ``str``); floats and
  bools through ``fit`` itself (numpy's text of each element: ``b"True"``, ``b"0.2"``),
  which no TensorFlow op spells alike;
* a float asked for as an integer or bool: ``fit`` itself, as numpy casts (out of the
  integer's range numpy wraps around where ``tf.cast`` saturates: 322.0 -> uint8 is 66
  in memory, 255 from ``tf.cast``);
* any other number or bool to a number or bool: ``tf.cast``, which agrees with numpy's
  ``astype`` (integers wrap around alike);
* a string asked for as a number: an error when the dataset is made (in memory, ``fit``
  rejects every such record).

A rank-0 integer stored as a feature value (an int64, narrowed to int32 in memory when
it fits) is parsed as int64 when it is to be cast, so that a later record's value
beyond int32 is cast from itself, as in memory, not from its int32 wrap-around.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import numpy as np

from transforms.ops.element_spec import LeafSpec, fit, plain_spec


def _names(spec: Any, name: str) -> List[str]:
    """Leaf names in ``tf.nest.flatten`` order (dict keys sorted), as the records name them."""
    if isinstance(spec, dict):
        return [n for k in sorted(spec) for n in _names(spec[k], f"{name}.{k}")]
    if isinstance(spec, (tuple, list)):
        return [n for i, s in enumerate(spec) for n in _names(s, f"{name}.{i}")]
    return [name]


def _leaf_names(spec: Any, with_label: bool) -> List[str]:
    if with_label:
        return _names(spec[0], "value") + _names(spec[1], "label")
    return _names(spec, "value")


def _stored_dtype(v: Any, wanted):
    import tensorflow as tf

    arr = np.asarray(v)
    if arr.dtype.kind in "SOU":
        return tf.string
    dtype = tf.as_dtype(arr.dtype)
    if dtype != wanted and arr.dtype.kind in "iu" and not isinstance(v, np.ndarray):
        return tf.int64  # an int64 feature value (a 0-d array is an ndarray, stored as raw bytes)
    return dtype


def stored_spec(requested: Any, first: Any) -> Any:
    """``requested`` (an element spec) with the dtypes that ``first`` (the first record's
    element as read back, numpy leaves) was stored with."""
    import tensorflow as tf

    try:
        tf.nest.assert_same_structure(requested, first, check_types=False)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"the element spec {requested} does not have the structure of the records the "
            f"selections wrote ({e})"
        ) from None
    leaves = [
        tf.TensorSpec(r.shape, _stored_dtype(v, r.dtype))
        for r, v in zip(tf.nest.flatten(requested), tf.nest.flatten(first))
    ]
    return tf.nest.pack_sequence_as(requested, leaves)


def caster(stored: Any, requested: Any, with_label: bool) -> Optional[Callable]:
    """A function taking a parsed element of ``stored`` to ``requested``'s dtypes, or
    None when every dtype is already the one requested."""
    import tensorflow as tf

    pairs = list(zip(tf.nest.flatten(stored), tf.nest.flatten(requested)))
    if all(s.dtype == r.dtype for s, r in pairs):
        return None
    for name, (s, r) in zip(_leaf_names(requested, with_label), pairs):
        if s.dtype == tf.string and r.dtype != tf.string:
            raise ValueError(
                f"feature {name} is stored as string, not a number: it cannot be given as "
                f"{r.dtype.name} (in memory every record would be rejected)"
            )

    def cast(element):
        out = [
            x if s.dtype == r.dtype else _cast(x, s.dtype, r.dtype)
            for x, (s, r) in zip(tf.nest.flatten(element), pairs)
        ]
        return tf.nest.pack_sequence_as(requested, out)

    return cast


def _fit(arr: np.ndarray, spec: LeafSpec) -> np.ndarray:
    out = fit(arr, spec)
    return np.asarray(out, dtype=object) if spec.numpy is None else out


def _cast(x, stored, wanted):
    import tensorflow as tf

    if wanted == tf.string and stored.is_integer:
        return tf.strings.as_string(x)
    if stored == tf.uint8 and wanted.is_floating:
        return tf.image.convert_image_dtype(x, wanted)
    if wanted == tf.string or (stored.is_floating and not wanted.is_floating):
        # numpy's text of a float or bool; numpy's float -> integer, which differs from
        # tf.cast out of range (wraps where TensorFlow saturates): fit itself, in numpy
        spec = plain_spec(tf.TensorSpec(None, wanted))
        out = tf.numpy_function(lambda arr: _fit(arr, spec), [x], wanted, stateful=False)
        out.set_shape(x.shape)
        return out
    return tf.cast(x, wanted)
