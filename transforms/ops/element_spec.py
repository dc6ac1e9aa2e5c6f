"""An element spec as plain Python, and element values fitted to it.

The streamed ``tf.data`` load types its elements by a spec of ``tf.TensorSpec`` leaves;
the element stage (:mod:`transforms.shard_elements`) fits every element to it in the
worker processes, which never import TensorFlow.  :func:`plain_spec` turns the spec into
:class:`LeafSpec` leaves that pickle without it, and :func:`fit` casts an element's numpy
leaves to them, or raises :class:`~transforms.ops.base.OpError` (a reject).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import numpy as np

from transforms.ops.base import OpError


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
