"""go-tfdata's sample and example stages, as plain callables.

A *sample* is a record dict; an *example* a ``tf.train.Example``.  Every stage here is a
callable ``x -> x | None`` (None filters, counted as ``filtered``), usable in
``ConvertConfig.sample_stages`` / ``example_stages`` and ``Dataset(...)``:

* selections keep some entries: ``ByKey``, ``ByKeyValue``, ``ByPrefix``, ``BySuffix``,
  ``BySubstring``, ``BySampleF``, ``ByExampleF``.  They work on samples and on examples
  (features); ``__key__``/``__shard__`` are always kept.  Give several to keep the union:
  ``ByKey("jpg", "cls")``.
* ``Rename(dest, *srcs)`` moves whichever of ``srcs`` is present to ``dest``.
* ``SampleF(f)`` / ``TFExampleF(f)`` apply a user function.
* ``FilterEmptySamples`` / ``FilterEmptyExamples`` drop records with no payload.
* ``SampleToTFExample(type_map)`` is the sample -> Example step with go-tfdata's types
  (``INT64`` parses ASCII integers such as ``b"42\\n"``; a non-integer is a reject).

On examples an array stored by an op (``x`` + ``x/shape`` + ``x/dtype``) is one entry,
as in the sample (where it is one ndarray; sample stages run before encoding, so samples
have no companions): selections match ``x`` and keep its companions, ``Rename`` moves them.

``as_stage`` adapts a Beam ``DoFn`` (anything with ``process``) to this callable shape.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, List

from transforms.record_types import META_KEYS, Record
from transforms.tfrecord import example as ex
from transforms.tfrecord import schema as exs

BYTES, INT64, FLOAT = exs.BYTES, exs.INT64, exs.FLOAT


class FeatureType:
    """go-tfdata's ``core.FeatureType`` names."""

    BYTES, INT64, FLOAT = exs.BYTES, exs.INT64, exs.FLOAT


def _is_example(x: Any) -> bool:
    return not isinstance(x, dict) and hasattr(x, "features")


# An array that an op produced is stored as three features (transforms.tfrecord.example): ``x``
# (raw bytes), ``x/shape`` and ``x/dtype``.  In a sample it is one entry, so on examples
# the stages treat it as one too: the companions are not entries of their own (a
# selection matches ``x``, never ``x/shape``) and go wherever ``x`` goes -- kept with it,
# renamed with it -- or parse_example / the record parsers could not rebuild the array.
_COMPANIONS = ("/shape", "/dtype")


def _companions(feats: Any, name: str) -> List[str]:
    """The ``/shape`` and ``/dtype`` features of array feature ``name`` that exist."""
    return [name + c for c in _COMPANIONS if name + c in feats]


def _is_companion(feats: Any, name: str) -> bool:
    return any(name.endswith(c) and name[: -len(c)] in feats for c in _COMPANIONS)


def _names(x: Any) -> List[str]:
    if _is_example(x):
        feats = x.features.feature
        return [n for n in feats if n not in META_KEYS and not _is_companion(feats, n)]
    return [n for n in x if n not in META_KEYS]


def _value(x: Any, name: str) -> Any:
    if _is_example(x):
        f = x.features.feature[name]
        kind = f.WhichOneof("kind")
        vals = list(getattr(f, kind).value) if kind else []
        return vals[0] if len(vals) == 1 else vals
    return x[name]


def _keep(x: Any, keep: Iterable[str]):
    keep = set(keep)
    if _is_example(x):
        feats = x.features.feature
        keep.update(c for n in list(keep) for c in _companions(feats, n))
        for n in [n for n in feats if n not in META_KEYS and n not in keep]:
            del feats[n]
        return x
    return {k: v for k, v in x.items() if k in META_KEYS or k in keep}


class _Selection:
    """Keep the entries for which ``match(x, name)`` holds."""

    light = True  # see transforms.ops.base.Op.light (a user predicate is not: _ByF)

    def __init__(self, *args):
        self.args = args

    def match(self, x: Any, name: str) -> bool:
        raise NotImplementedError

    def __call__(self, x):
        return _keep(x, [n for n in _names(x) if self.match(x, n)])

    def describe(self) -> str:
        return f"{type(self).__name__}({', '.join(_show(a) for a in self.args)})"

    __repr__ = describe


def _show(a):
    return getattr(a, "__qualname__", None) or repr(a)


class ByKey(_Selection):
    """Entries named exactly one of ``keys``."""

    def match(self, x, name):
        return name in self.args


class ByKeyValue(_Selection):
    """Entry ``key`` if its value equals ``value`` (str values compare as UTF-8 bytes)."""

    def __init__(self, key: str, value: Any):
        super().__init__(key, value)

    def match(self, x, name):
        key, want = self.args
        if name != key:
            return False
        have = _value(x, name)
        if isinstance(want, str) and isinstance(have, (bytes, bytearray)):
            want = want.encode("utf-8")
        return have == want


class ByPrefix(_Selection):
    """Entries whose name starts with one of the prefixes."""

    def match(self, x, name):
        return any(name.startswith(p) for p in self.args)


class BySuffix(_Selection):
    def match(self, x, name):
        return any(name.endswith(p) for p in self.args)


class BySubstring(_Selection):
    def match(self, x, name):
        return any(p in name for p in self.args)


class _ByF(_Selection):
    """Entries named in what ``f(x)`` returns (an iterable of names)."""

    light = False  # a user function: it may do anything

    def __init__(self, f: Callable[[Any], Iterable[str]]):
        super().__init__(f)

    def __call__(self, x):
        return _keep(x, list(self.args[0](x)))


class BySampleF(_ByF):
    pass


class ByExampleF(_ByF):
    pass


class Rename:
    """Move the entry found under one of ``srcs`` to ``dest``; more than one present is
    an error (which one would win is not obvious); none present leaves the record as is."""

    light = True

    def __init__(self, dest: str, *srcs: str):
        if not srcs:
            raise ValueError("Rename needs at least one source name")
        self.dest, self.srcs = dest, srcs

    def describe(self):
        return f"Rename({self.dest!r}, {', '.join(map(repr, self.srcs))})"

    __repr__ = describe

    def __call__(self, x):
        present = [s for s in self.srcs if s in (x.features.feature if _is_example(x) else x)]
        if len(present) > 1:
            raise ValueError(
                f"more than one of {', '.join(present)} present; cannot rename to {self.dest!r}"
            )
        if not present or present[0] == self.dest:
            return x
        src = present[0]
        if _is_example(x):
            feats = x.features.feature
            for c in _companions(feats, self.dest):  # dest's old array shape/dtype would
                del feats[c]  # describe the new value wrongly
            for name in [src] + _companions(feats, src):
                feats[self.dest + name[len(src) :]].CopyFrom(feats[name])
                del feats[name]
            return x
        out = dict(x)
        out[self.dest] = out.pop(src)
        return out


class _F:
    def __init__(self, f: Callable[[Any], Any]):
        if not callable(f):
            raise TypeError(f"{type(self).__name__} needs a callable")
        self.f = f

    def __call__(self, x):
        return self.f(x)

    def describe(self):
        return f"{type(self).__name__}({_show(self.f)})"

    __repr__ = describe


class SampleF(_F):
    """``f(record) -> record | None``."""


class TFExampleF(_F):
    """``f(example) -> example | None``."""


class _Filter:
    light = True

    def describe(self):
        return type(self).__name__

    __repr__ = describe


class FilterEmptySamples(_Filter):
    """Drop records with no entries besides ``__key__``/``__shard__``."""

    def __call__(self, x):
        return x if _names(x) else None


class FilterEmptyExamples(_Filter):
    """Drop examples with no features besides ``__key__``."""

    def __call__(self, x):
        return x if _names(x) else None


class SampleToTFExample:
    """The sample -> Example step with a type map (``{"cls": INT64}`` or ``"cls:int64"``)."""

    def __init__(self, type_map: Any = None):
        self.type_map = exs.parse_type_map(type_map)

    def __call__(self, record: Record):
        return ex.record_to_example(record, self.type_map)

    def describe(self):
        return f"SampleToTFExample({self.type_map})"


class DoFnStage:
    """A Beam DoFn as a stage: ``setup`` once per worker, then ``process(x)`` per item.

    ``process`` yielding nothing filters the item; one output replaces it; more than one
    is an error (a stage maps one record to one record, so that keys stay unique).
    """

    def __init__(self, dofn: Any):
        self.dofn = dofn
        self._ready = False

    def __getstate__(self):
        return {"dofn": self.dofn, "_ready": False}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __call__(self, x):
        if not self._ready:
            with _setup_lock:
                if not self._ready:
                    for hook in ("setup", "start_bundle"):
                        fn = getattr(self.dofn, hook, None)
                        if callable(fn):
                            fn()
                    self._ready = True
        outs = list(self.dofn.process(x) or [])
        if not outs:
            return None
        if len(outs) > 1:
            raise ValueError(f"DoFn produced {len(outs)} outputs for one input; expected 0 or 1")
        out = outs[0]
        return (
            getattr(out, "value", out)
            if type(out).__name__ in ("WindowedValue", "TimestampedValue")
            else out
        )

    def describe(self):
        return type(self.dofn).__name__


_setup_lock = threading.Lock()


def as_stage(obj: Any) -> Callable[[Any], Any]:
    """A callable stage from a callable or a Beam DoFn."""
    if hasattr(obj, "process") and not hasattr(obj, "value") and hasattr(obj, "setup"):
        return DoFnStage(obj)
    if callable(obj):
        return obj
    raise TypeError(f"a stage must be callable or a Beam DoFn, not {type(obj).__name__}")
