"""The common shape of every op and selection: a value computed from a record.

An op has two faces:

* ``op.value(record)`` computes a value (an array, bytes, a number...).  Ops nest: the
  ``what`` of ``Resize(Convert(Decode("jpg"), "float32"), (224, 224))`` is another op,
  whose value is the input.  A plain string ``what`` names a record entry.
* ``op(record)`` is the *sample stage* face used in ``conversions``: it returns a new
  record whose ``op.ext_name`` entry is replaced by ``op.value(record)``.

Ops are plain picklable objects (Beam ships them to workers), compare by their
description, and ``describe()`` names them in reject reasons and manifests.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterator, Optional, Tuple

from transforms.record_types import Record, payload_keys


class OpError(ValueError):
    """An op cannot produce its value for this record (becomes an ``op`` reject)."""


def entry(record: Record, ext: str) -> Any:
    try:
        return record[ext]
    except KeyError:
        have = ", ".join(payload_keys(record)) or "nothing"
        raise OpError(f"record has no '{ext}' entry (it has: {have})") from None


class Op:
    """Base class: subclasses implement ``value`` and set ``what`` (str or Op)."""

    what: Any = None
    _children: Tuple[str, ...] = ("what",)
    # per-record work too small for a worker process to pay off (picking entries, not
    # decoding them): an in-process job whose ops are all light stays on threads, unless
    # its workers would write into local '{}' shards themselves (options.auto_processes;
    # Beam jobs use worker processes either way)
    light: bool = False

    # -- the two faces -------------------------------------------------------------------
    def value(self, record: Record, size_hint: Optional[Tuple[int, int]] = None) -> Any:
        """The op's result for ``record``.  ``size_hint`` = (w, h) lets a decode below a
        Resize decode JPEGs at reduced scale; ops that change geometry do not pass it on."""
        raise NotImplementedError

    def __call__(self, record: Record) -> Record:
        name = self.ext_name
        if name is None:
            raise OpError(f"{self.describe()} has no entry to write its result to (give ext_name)")
        out = dict(record)
        out[name] = self.value(record)
        return out

    # -- naming --------------------------------------------------------------------------
    @property
    def ext_name(self) -> Optional[str]:
        """The record entry this op reads at its root and writes as a conversion."""
        w = self.what
        return w if isinstance(w, str) else getattr(w, "ext_name", None)

    def _args(self) -> Tuple[Any, ...]:
        return (self.what,)

    def describe(self) -> str:
        return f"{type(self).__name__}({', '.join(_show(a) for a in self._args())})"

    __repr__ = describe

    def __eq__(self, other):
        return type(self) is type(other) and self.describe() == other.describe()

    def __hash__(self):
        return hash(self.describe())

    # -- structure -----------------------------------------------------------------------
    def children(self) -> Iterator["Op"]:
        for name in self._children:
            yield from _ops_in(getattr(self, name, None))


def _ops_in(v) -> Iterator[Op]:
    if isinstance(v, Op):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _ops_in(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _ops_in(x)


def _show(a: Any) -> str:
    if isinstance(a, Op):
        return a.describe()
    if isinstance(a, str):
        return repr(a)
    name = getattr(a, "name", None)
    if name is not None and not isinstance(a, (list, tuple, dict)):
        return str(name)  # numpy / tf dtypes
    if isinstance(a, type):
        return a.__name__
    return repr(a)


def check_what(op: str, what: Any) -> Any:
    """An op's input, checked when the op is built: a record entry's name or another op.
    Anything else (``Decode(5)``) would only fail on every record, as rejects."""
    if not isinstance(what, (str, Op)):
        raise TypeError(f"{op} takes an extension name (such as 'jpg') or an op, not {what!r}")
    return what


def evaluate(what: Any, record: Record, size_hint: Optional[Tuple[int, int]] = None) -> Any:
    """The value ``what`` stands for: a record entry (str) or a nested op's value."""
    if isinstance(what, str):
        return entry(record, what)
    if isinstance(what, Op):
        return what.value(record, size_hint)
    raise TypeError(f"expected an extension name or an op, got {type(what).__name__}")


def walk(op: Any) -> Iterator[Op]:
    """Every op in a tree (pre-order), for checks such as picklability."""
    for o in _ops_in(op):
        yield o
        for child in o.children():
            yield from walk(child)


def map_ops(op: Any, fn: Callable[[Op], Op]) -> Any:
    """A copy of an op tree with ``fn`` applied to every op (inputs are not mutated)."""
    if isinstance(op, (list, tuple)):
        return type(op)(map_ops(x, fn) for x in op)
    if isinstance(op, dict):
        return {k: map_ops(v, fn) for k, v in op.items()}
    if not isinstance(op, Op):
        return op
    new = copy.copy(op)
    for name in op._children:
        if hasattr(op, name):
            setattr(new, name, map_ops(getattr(op, name), fn))
    return fn(new)
