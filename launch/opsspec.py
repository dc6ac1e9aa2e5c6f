"""``--ops``: conversions and selections for ``tar2tf convert`` from a small spec.

The spec is one of:

* ``module:function`` -- a Python callable returning ``(conversions, selections)``, a dict
  with those keys, or a list of conversions;
* a JSON or YAML file, or the same text inline, holding a mapping with ``conversions``
  and ``selections`` lists (a bare list means conversions only).

Each op is written either as a call expression, ``"Resize(Decode(jpg), (32, 32))"``, or
as a mapping, ``{"op": "Resize", "args": ["jpg", [32, 32]], "kwargs": {"method": "bicubic"}}``
(shorthand ``{"Resize": ["jpg", [32, 32]]}``).  In call expressions bare words are
strings (``jpg``), ``tf.float32`` / ``np.uint8`` are dtypes, and only op names may be
called -- the text is parsed with :mod:`ast`, never evaluated.  Callables for ``Func``,
``SampleF``... are given as ``"module:function"`` strings.  A selection may also be a
bare extension (``cls``).  The original API's example (docs/api.md) as one command::

    tar2tf convert 'train-{0..3}.tar' --base data -o out/train-{}.record \\
        --ops '{conversions: [Decode(jpg), "Resize(jpg, (32, 32))"], selections: [jpg, cls]}'
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
from typing import Any, List, Tuple

from transforms import ops as O

OPS = {
    name: getattr(O, name)
    for name in O.__all__
    if isinstance(getattr(O, name), type) and name not in ("Op", "OpError", "FeatureType")
}
_CALLABLE_FIRST = {"Func", "SampleF", "TFExampleF", "BySampleF", "ByExampleF"}
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


MAX_SHOWN = 120  # characters of the user's text an error quotes (a spec may be kilobytes)
MAX_MESSAGE = 600


class SpecError(ValueError):
    """An --ops spec that cannot be understood (usage error, exit status 2).  Its message
    is cut to :data:`MAX_MESSAGE` characters: whatever it quotes, it stays one short line."""

    def __init__(self, message: str):
        if len(message) > MAX_MESSAGE:
            half = MAX_MESSAGE // 2
            message = f"{message[:half]} ... {message[-half:]}"
        super().__init__(message)


def _shown(x: Any) -> str:
    """``repr(x)`` for an error line, cut to :data:`MAX_SHOWN` characters."""
    text = repr(x)
    if len(text) <= MAX_SHOWN:
        return text
    return f"{text[:MAX_SHOWN]}... ({len(text)} characters)"


def resolve_callable(ref: str):
    """``"package.module:function"`` -> the object."""
    mod, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(mod)
    except ImportError as e:
        raise SpecError(f"cannot import {mod!r} for {ref!r}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpecError(f"{mod!r} has no {attr!r}") from None
    return obj


def _make(name: str, args: List[Any], kwargs: dict):
    cls = OPS.get(name)
    if cls is None:
        raise SpecError(f"unknown op {name!r}; known: {', '.join(sorted(OPS))}")
    if name in _CALLABLE_FIRST and args and isinstance(args[0], str):
        args = [resolve_callable(args[0])] + list(args[1:])
    try:
        _check_numbers(cls, args, kwargs)
        return cls(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise SpecError(f"bad arguments for {name}: {e}; expected {_usage(name, cls)}") from None


_NUMBER_HINTS = {"int", "float", "Optional[int]", "Optional[float]"}


def _check_numbers(cls, args: List[Any], kwargs: dict) -> None:
    """A word given for a parameter annotated ``int``/``float`` (``Rotate(jpg, angle=abc)``)
    is refused here, a TypeError like the constructor's own: some constructors only store
    the value, and the op then failed on every record (each one a reject, exit 3) instead
    of the spec being a usage error (exit 2)."""
    try:
        bound = inspect.signature(cls).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return  # the constructor call says what is wrong
    params = inspect.signature(cls).parameters
    for pname, value in bound.arguments.items():
        hint = params[pname].annotation  # a string under ``from __future__ import annotations``
        hint = (
            hint
            if isinstance(hint, str)
            else getattr(hint, "__name__", str(hint)).replace("typing.", "")
        )
        if hint in _NUMBER_HINTS and isinstance(value, str):
            raise TypeError(f"{pname} must be a number, not {value!r}")


def _usage(name: str, cls) -> str:
    """``Resize(what, size: Tuple[int, int], ...)`` and the docstring's first sentence."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        params = ()
    parts = []
    for p in params:  # str(signature) would quote the string annotations
        star = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        ann = (
            p.annotation
            if isinstance(p.annotation, str)
            else inspect.formatannotation(p.annotation)
        )
        parts.append(
            star
            + p.name
            + ("" if p.annotation is p.empty else f": {ann}")
            + ("" if p.default is p.empty else f" = {p.default!r}")
        )
    sig = f"({', '.join(parts)})" if params else "(...)"
    doc = (
        (inspect.getdoc(cls) or "")
        .split("\n\n")[0]
        .replace("\n", " ")
        .split(". ")[0]
        .rstrip(".")
        .replace("``", "")
    )
    return f"{name}{sig}" + (f" -- {doc}" if doc else "")


# -- call expressions -----------------------------------------------------------------------


def _node(n: ast.AST) -> Any:
    if isinstance(n, ast.Call):
        if not isinstance(n.func, ast.Name):
            raise SpecError(f"only op names can be called, not {_shown(ast.unparse(n.func))}")
        kwargs = {k.arg: _node(k.value) for k in n.keywords if k.arg}
        return _make(n.func.id, [_node(a) for a in n.args], kwargs)
    if isinstance(n, ast.Constant):
        return n.value
    if isinstance(n, ast.Name):
        return n.id  # bare word: an extension name
    if (
        isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id in ("tf", "np", "numpy")
    ):
        return n.attr  # tf.float32 -> "float32"
    dotted = _dotted(n)
    if dotted is not None:
        return (
            dotted  # rgb.png, depth.npy, txt.gz: a dotted extension (WebDataset shards have many)
        )
    if isinstance(n, (ast.Tuple, ast.List)):
        return [_node(e) for e in n.elts]
    if isinstance(n, ast.Dict):
        return {_node(k): _node(v) for k, v in zip(n.keys, n.values)}
    if (
        isinstance(n, ast.UnaryOp)
        and isinstance(n.op, ast.USub)
        and isinstance(n.operand, ast.Constant)
    ):
        return -n.operand.value
    text = ast.unparse(n)
    hint = (
        " (quote an extension that is not made of plain words: 'seg-0.png')"
        if re.search(r"[.-]", text)
        else ""
    )
    raise SpecError(f"not allowed in an op expression: {_shown(text)}{hint}")


def _dotted(n: ast.AST):
    """``a.b.c`` made of bare words -> ``"a.b.c"``, else None."""
    parts = []
    while isinstance(n, ast.Attribute):
        parts.append(n.attr)
        n = n.value
    if not parts or not isinstance(n, ast.Name):
        return None
    return ".".join([n.id] + parts[::-1])


def parse_expr(text: str):
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        hint = ""
        if text.count("(") > text.count(")"):  # YAML split an unquoted item at its comma
            hint = " (in YAML, quote an op whose arguments have commas: '[\"Decode(jpg, channels=3)\"]')"
        elif re.search(r"\w[.-]\d", text):  # an extension that is no Python name
            hint = " (quote an extension that is not made of plain words: Decode('seg.0.png'))"
        raise SpecError(f"cannot parse op {_shown(text)}: {e.msg}{hint}") from None
    return _node(tree.body)


# -- mappings -------------------------------------------------------------------------------


def _item(x: Any, selection: bool):
    if isinstance(x, str):
        if "(" in x:
            return parse_expr(x)
        return x if selection else parse_expr(x)
    if isinstance(x, dict):
        if "op" in x:
            args = [_arg(a) for a in (x.get("args") or [])]
            return _make(x["op"], args, {k: _arg(v) for k, v in (x.get("kwargs") or {}).items()})
        if len(x) == 1:
            name, val = next(iter(x.items()))
            if name in OPS:
                if isinstance(val, dict):
                    return _make(name, [], {k: _arg(v) for k, v in val.items()})
                return _make(name, [_arg(a) for a in (val if isinstance(val, list) else [val])], {})
        if selection:
            return O.SelectDict({k: _item(v, True) for k, v in x.items()})
        raise SpecError(f"cannot read op {_shown(x)}")
    if isinstance(x, list) and selection:
        return [_item(v, True) for v in x]
    if isinstance(x, O.Op) or callable(x):
        return x
    raise SpecError(f"cannot read op {_shown(x)}")


def _arg(a: Any):
    if isinstance(a, dict) and ("op" in a or (len(a) == 1 and next(iter(a)) in OPS)):
        return _item(a, False)
    if isinstance(a, str) and "(" in a:
        return parse_expr(a)
    return a


def from_data(data: Any) -> Tuple[list, list]:
    if (
        isinstance(data, (list, tuple))
        and len(data) == 2
        and all(isinstance(d, (list, tuple)) for d in data)
        and not isinstance(data, list)
    ):
        conv, sel = data
    elif isinstance(data, (list, tuple)):
        conv, sel = data, []
    elif isinstance(data, dict):
        unknown = set(data) - {"conversions", "selections"}
        if unknown:
            raise SpecError(
                f"unknown keys in ops spec: {sorted(unknown)} (use conversions, selections)"
            )
        conv, sel = data.get("conversions") or [], data.get("selections") or []
    else:
        raise SpecError(
            f"an ops spec is a mapping with conversions/selections, not {type(data).__name__}"
        )
    return [_item(c, False) for c in conv], [_item(s, True) for s in sel]


def load_ops(spec: str, seed: int = None) -> Tuple[list, list]:
    """``--ops`` value -> ``(conversions, selections)``; see the module docstring.  A spec
    nested deeper than the parsers go (YAML, mappings, call expressions) is a
    :class:`SpecError` like any other unreadable spec."""
    try:
        return _load_ops(spec, seed)
    except (RecursionError, MemoryError):
        raise SpecError(
            f"ops spec {_shown(spec)} nests too deeply to be read (lists, mappings or calls "
            "inside one another)"
        ) from None


def _call_ref(ref: str, obj: Any) -> Any:
    """What the ``module:function`` named by ``ref`` returns, called without arguments --
    unless it needs some: then it is no ops function (``os:system``), a usage error."""
    if not callable(obj):
        return obj
    try:
        inspect.signature(obj).bind()
    except TypeError as e:
        raise SpecError(
            f"--ops {_shown(ref)} is not an ops function: it needs arguments ({e}); name a "
            "function that takes none and returns the conversions and selections"
        ) from None
    except ValueError:  # no signature to look at (some builtins): calling it says
        pass
    try:
        return obj()
    except TypeError as e:
        if e.__traceback__ is not None and e.__traceback__.tb_next is None:  # the call itself
            raise SpecError(
                f"--ops {_shown(ref)} cannot be called without arguments: {e}"
            ) from None
        raise


def _load_ops(spec: str, seed: int = None) -> Tuple[list, list]:
    if _REF.match(spec.strip()) and not os.path.exists(spec):
        obj = resolve_callable(spec.strip())
        conv, sel = from_data(_call_ref(spec.strip(), obj))
    else:
        import yaml

        text = spec
        if os.path.isfile(spec):
            with open(spec, encoding="utf-8") as f:
                text = f.read()
        elif re.fullmatch(r"[\w./-]+\.(json|ya?ml)", spec.strip()):
            raise SpecError(f"ops spec file {spec!r} does not exist")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(
                f"ops spec is neither a file nor valid JSON/YAML: {_shown(str(e))}"
            ) from None
        conv, sel = from_data(data)
    if sel and not 1 <= len(sel) <= 2:
        raise SpecError(f"selections are [value] or [value, label], got {len(sel)}")
    conv = O.fuse(conv)
    if seed is not None:
        conv, sel = O.with_seed(conv, seed), O.with_seed(sel, seed)
    return conv, sel
