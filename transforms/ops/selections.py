"""Selections: build a datapoint (value or label) from a record.

``Select("cls")`` is the entry itself; ``SelectJSON("json", ["a", 0, "b"])`` a value
nested in a JSON entry; ``SelectList([...])`` and ``SelectDict({...})`` combine any
selections or ops.  A plain string stands for ``Select``; a plain list of ops (the original
``AisDataset`` API's ``val_op`` lists) stands for a dict keyed by each op's ``ext_name``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Sequence, Union

from transforms.ops.base import Op, OpError, check_what, entry, evaluate

Path = Union[str, int, Sequence[Union[str, int]]]


class Select(Op):
    """The value of one record entry, unchanged."""

    light = True

    def __init__(self, ext_name: str):
        if not isinstance(ext_name, str):
            raise TypeError(f"Select takes an extension name, not {type(ext_name).__name__}")
        self.what = ext_name

    def value(self, record, size_hint=None):
        return entry(record, self.what)


class SelectJSON(Op):
    """Parse entry ``ext_name`` as JSON and return the value at ``path``.

    ``path``: a key (str) or index (int) for a first-level value, or a list of them for
    nested values, e.g. ``["objects", 0, "label"]``.
    """

    def __init__(self, ext_name: str, path: Path):
        self.what = check_what("SelectJSON", ext_name)
        self.path = list(path) if isinstance(path, (list, tuple)) else [path]
        for p in self.path:
            if not isinstance(p, (str, int)) or isinstance(p, bool):
                raise TypeError(f"SelectJSON path elements are str or int, not {p!r}")

    @property
    def light(self):
        return isinstance(self.what, str) or getattr(self.what, "light", False)

    def _args(self):
        return (self.what, self.path if len(self.path) != 1 else self.path[0])

    def value(self, record, size_hint=None):
        raw = evaluate(self.what, record)
        if isinstance(raw, (bytes, bytearray, memoryview)):
            # json.loads on bytes, as the original API did: it detects UTF-8 (with or without a
            # BOM, which RFC 8259 lets parsers ignore), UTF-16 and UTF-32; decoding as
            # UTF-8 first rejected a BOM ("Unexpected UTF-8 BOM") and UTF-16/32 files
            raw = bytes(raw)
        if isinstance(raw, (str, bytes)):
            try:
                doc = json.loads(raw)
            except UnicodeDecodeError as e:
                raise OpError(
                    f"invalid JSON in '{self.what}': not UTF-8/16/32 ({e.encoding}: "
                    f"{e.reason} at byte {e.start})"
                ) from None
            except json.JSONDecodeError as e:
                raise OpError(
                    f"invalid JSON in '{self.what}': {e.msg} at line {e.lineno} column {e.colno}"
                ) from None
        else:
            doc = raw  # already parsed (e.g. by a Func)
        cur, walked = doc, []
        for p in self.path:
            try:
                if isinstance(cur, list) and isinstance(p, int):
                    cur = cur[p]
                elif isinstance(cur, dict) and isinstance(p, str):
                    cur = cur[p]
                else:
                    raise KeyError(p)
            except (KeyError, IndexError):
                where = "".join(f"[{w!r}]" for w in walked) or "the top level"
                raise OpError(
                    f"JSON path {self.path!r} not found in '{self.what}': no {p!r} at {where}"
                ) from None
            walked.append(p)
        return cur


class SelectList(Op):
    """A list of the values of several selections or ops."""

    _children = ("items",)

    def __init__(self, items: Sequence[Any]):
        self.items = [as_selection(x) for x in items]

    @property
    def light(self):
        return all(i.light for i in self.items)

    @property
    def ext_name(self):
        return None

    def _args(self):
        return (self.items,)

    def value(self, record, size_hint=None) -> List[Any]:
        return [s.value(record) for s in self.items]


class SelectDict(Op):
    """A dict ``name -> value`` of several selections or ops."""

    _children = ("items",)

    def __init__(self, items: Mapping[str, Any]):
        self.items = {str(k): as_selection(v) for k, v in items.items()}

    @property
    def light(self):
        return all(i.light for i in self.items.values())

    @property
    def ext_name(self):
        return None

    def _args(self):
        return (self.items,)

    def value(self, record, size_hint=None) -> Dict[str, Any]:
        return {k: s.value(record) for k, s in self.items.items()}


def as_selection(x: Any) -> Op:
    """str -> Select; op -> itself; list/tuple of ops -> dict by ``ext_name`` (as ``AisDataset``'s ``val_op``)."""
    if isinstance(x, str):
        return Select(x)
    if isinstance(x, Op):
        return x
    if isinstance(x, dict):
        return SelectDict(x)
    if isinstance(x, (list, tuple)):
        items = [as_selection(i) for i in x]
        names = [i.ext_name for i in items]
        if any(n is None for n in names):
            raise ValueError(
                "in a list of ops used as a selection every op needs an ext_name "
                "(e.g. Func(f, ext_name='x')); use SelectList for a plain list"
            )
        return SelectDict(dict(zip(names, items)))
    raise TypeError(f"not a selection: {x!r}")
