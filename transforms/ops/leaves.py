"""Selected values as leaves, and the selection stage that writes them into records.

``selections`` is the original ``Dataset`` API's list ``[value, label]`` (one item gives value-only
datapoints).  Each item is a selection or op (``"jpg"`` stands for ``Select("jpg")``).

Leaf rules: bytes that are an ASCII decimal integer (``b"3\\n"``, the usual ``.cls``)
that fits int64 become integers (a longer digit string, such as a 20-digit id, stays
bytes: it is text that happens to be digits, and no int64 feature could hold it); Python
ints become int32 (int64 if out of range), floats float32, bools bool, lists of numbers
or of bools arrays; other bytes stay bytes (``tf.string``).  :func:`leaf` gives numpy
leaves (the elements of the streamed ``tf.data`` load); the
:class:`SelectionStage` writes the same leaves into a converted record as entries
``value`` and ``label`` (nested ones as ``value.<name>`` / ``value.<index>``; scalars as
Python values), which the default encoding stores.

numpy is imported only for values that need it (``transforms.lazynp``): a shard worker
selecting an image and an integer label never imports it.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Sequence, Tuple

from transforms.lazynp import is_array, loaded, np
from transforms.ops.base import Op, OpError
from transforms.ops.selections import SelectDict, SelectList, as_selection
from transforms.record_types import KEY, SHARD, Record

NAMES = ("value", "label")
_INT = re.compile(rb"\s*[-+]?\d+\s*\Z")
_INT64 = (-(2**63), 2**63)


def normalize_selections(selections: Sequence[Any]) -> List[Op]:
    sels = [as_selection(s) for s in selections]
    if not 1 <= len(sels) <= 2:
        raise ValueError(f"selections are [value] or [value, label], got {len(sels)} items")
    return sels


def _numpy(v: Any, kind: str) -> bool:
    """``isinstance(v, numpy.<kind>)`` without importing numpy: no value is one before."""
    mod = loaded()
    return mod is not None and isinstance(v, getattr(mod, kind))


def _text_int(v: Any) -> Optional[int]:
    """The integer that bytes ``v`` spell in ASCII decimal, or None: not such text, or
    outside int64 (an id of 20 digits is kept as the bytes it is; making it an integer
    would only fail, rejecting the record)."""
    if isinstance(v, (bytes, bytearray)) and len(v) < 32 and _INT.match(bytes(v)) is not None:
        i = int(bytes(v))
        if _INT64[0] <= i < _INT64[1]:
            return i
    return None


def leaf(v: Any) -> Any:
    """A selected value as a numpy-friendly leaf (see the module docstring)."""
    if type(v) is bytes and len(v) >= 32:  # an image or other payload: itself (the usual case)
        return v
    if is_array(v):
        return v
    i = _text_int(v)
    if i is not None:
        v = i
    if isinstance(v, bool):
        return np.bool_(v)
    if isinstance(v, int) or _numpy(v, "integer"):
        iv = int(v)
        return np.int32(iv) if -(2**31) <= iv < 2**31 else np.int64(iv)
    if isinstance(v, float) or _numpy(v, "floating"):
        return np.float32(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, (list, tuple)):
        arr = np.asarray(v)
        if arr.dtype.kind in "iu":
            return arr.astype(
                np.int32
                if arr.size == 0 or (arr.min() >= -(2**31) and arr.max() < 2**31)
                else np.int64
            )
        if arr.dtype.kind == "f":
            return arr.astype(np.float32)
        if arr.dtype.kind == "b":  # JSON's [true, false]: tf.bool, as a single bool is
            return arr
        if arr.dtype.kind in "SU":
            return np.asarray([x.encode() if isinstance(x, str) else x for x in v], dtype=object)
        raise OpError(f"cannot make a tensor of the list {str(v)[:60]}")
    if v is None:
        raise OpError("selection produced None")
    raise OpError(f"cannot make a tensor of {type(v).__name__}")


def structured(sel: Op, value: Any) -> Any:
    """Apply :func:`leaf` following the selection's structure."""
    if isinstance(sel, SelectDict):
        return {k: structured(s, value[k]) for k, s in sel.items.items()}
    if isinstance(sel, SelectList):
        return tuple(structured(s, v) for s, v in zip(sel.items, value))
    return leaf(value)


def datapoint(sels: Sequence[Op], record: Record) -> Any:
    """The (value, label) element of a record (or the value alone for one selection)."""
    parts = tuple(structured(s, s.value(record)) for s in sels)
    return parts if len(parts) > 1 else parts[0]


def _plain(v: Any) -> Any:
    """A numpy scalar leaf as its Python value (what a record entry holds)."""
    return v.item() if _numpy(v, "generic") else v


def flatten(name: str, v: Any) -> List[Tuple[str, Any]]:
    if isinstance(v, dict):
        return [kv for k in v for kv in flatten(f"{name}.{k}", v[k])]
    if isinstance(v, tuple):
        return [kv for i, x in enumerate(v) for kv in flatten(f"{name}.{i}", x)]
    return [(name, _plain(v))]  # Python scalars -> int64 / float / bytes features


def entry_value(v: Any) -> Any:
    """``_plain(leaf(v))``: a selected leaf as a record entry, without numpy for bytes,
    integer labels and strings (the values of nearly every dataset)."""
    if type(v) is bytes and len(v) >= 32:
        return v
    i = _text_int(v)
    if i is not None:
        return i  # fits int64: np.int32(i).item() / np.int64(i).item() is i
    if type(v) is bytes:
        return v
    if type(v) is int and _INT64[0] <= v < _INT64[1]:
        return v  # np.int32(v).item() / np.int64(v).item() is v
    if type(v) is str:
        return v.encode("utf-8")
    return _plain(leaf(v))


class SelectionStage:
    """Sample stage: record -> ``{__key__, __shard__, value[...], label[...]}``.

    ``bool_arrays``: write a bool leaf as a 0-d bool array, whose ``/dtype`` feature says
    ``bool`` (the default encoding stores a single bool as an int64 0/1, like an integer):
    for records read back into elements without their element spec (a remote in-memory
    load infers it from its first record)."""

    def __init__(self, selections: Sequence[Any], bool_arrays: bool = False):
        self.sels = normalize_selections(selections)
        self.light = all(s.light for s in self.sels)  # see transforms.ops.base.Op.light
        self.bool_arrays = bool_arrays

    def __call__(self, record: Record) -> Record:
        out = {KEY: record.get(KEY), SHARD: record.get(SHARD, "")}
        for name, sel in zip(NAMES, self.sels):
            v = sel.value(record)
            if isinstance(sel, (SelectDict, SelectList)):
                out.update(flatten(name, structured(sel, v)))
            else:
                out[name] = entry_value(v)
        if self.bool_arrays:
            for name, v in out.items():
                if type(v) is bool:
                    out[name] = np.asarray(v)
        return out

    def describe(self) -> str:
        return "Select[" + ", ".join(s.describe() for s in self.sels) + "]"


def selection_stage(selections: Sequence[Any], bool_arrays: bool = False) -> SelectionStage:
    return SelectionStage(selections, bool_arrays)
