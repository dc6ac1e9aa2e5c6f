"""The element spec of a load given no ``output_signature``, inferred from a first element.

Its dtypes are the element's.  Its shapes are kept only where the ops fix them (a
``Resize``, possibly under ``Convert``/``Rotate``); elsewhere (a ``Decode`` alone, JSON
lists, ``Func``) the dimensions are left unknown (an image's channel count excepted), or
every record shaped unlike the first would be rejected.  ``output_shapes`` given by the
caller win.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

from pipelines.tfdata import datapoints as dp
from transforms.ops import Convert, Resize, Rotate, Select, SelectDict, SelectList
from transforms.ops.selections import as_selection


def inferred_spec(el: Any, conversions: Sequence[Any], selections: Sequence[Any], shapes, types):
    """The element spec of ``el`` (see the module doc), for a load with these conversions
    and selections; ``shapes``/``types``: the caller's ``output_shapes``/``output_types``."""
    spec = dp.spec_of(el, shapes, types)
    if shapes is not None:
        return spec
    fixed = _fixed_entries(conversions)
    if len(selections) == 1:
        return _relax(spec, selections[0], fixed)
    return tuple(_relax(s, sel, fixed) for s, sel in zip(spec, selections))


def _fixed_entries(conversions) -> Dict[str, bool]:
    """Entry -> whether the conversion that writes it last gives every record the same
    shape."""
    fixed: Dict[str, bool] = {}
    for op in conversions:
        name = getattr(op, "ext_name", None)
        if name:
            fixed[name] = _op_fixed(op, fixed)
    return fixed


def _op_fixed(op, fixed: Dict[str, bool]) -> bool:
    if isinstance(op, Resize):
        return True
    if isinstance(op, (Convert, Rotate)):  # same shape out as in
        inner = op.what
        return fixed.get(inner, False) if isinstance(inner, str) else _op_fixed(inner, fixed)
    if isinstance(op, Select):
        return fixed.get(op.what, False)
    return False


def _relax(spec, sel, fixed: Dict[str, bool]):
    """``spec`` (following the selection's structure) with unknown dimensions where the ops
    do not fix the shape; rank-3 leaves (images) keep their channel count."""
    import tensorflow as tf

    if isinstance(sel, SelectDict):
        return {k: _relax(spec[k], s, fixed) for k, s in sel.items.items()}
    if isinstance(sel, SelectList):
        return tuple(_relax(x, s, fixed) for x, s in zip(spec, sel.items))
    rank = spec.shape.rank
    if not rank or _op_fixed(as_selection(sel), fixed):
        return spec
    dims = [None] * rank
    if rank == 3:
        dims[2] = spec.shape[2]
    return tf.TensorSpec(dims, spec.dtype)
