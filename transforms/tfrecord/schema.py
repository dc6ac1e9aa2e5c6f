"""Feature types of the Examples tar2tf writes: the type map that asks for them and the
schema that records them.

A feature is one of three kinds, ``bytes``, ``int64`` or ``float`` (:data:`FEATURE_TYPES`).
A *type map* (``{"cls": "int64", "score": "float"}``, or the CLI's
``cls:int64,score:float``; :func:`parse_type_map`) asks for typed features; names it
has that no written feature has are warned about (:func:`unmatched_types`).  A *schema*
maps feature name -> ``{dtype, shape}`` as seen in Examples (:func:`schema_of`,
:func:`schema_of_message`), merged over a job's records into the manifest's
(:func:`merge_schema`), and read back as a ``tf.io`` parse spec (:func:`tf_feature_spec`).

:mod:`transforms.tfrecord.example` encodes records with these types and re-exports these names.
Neither numpy nor TensorFlow is imported here, nor protobuf until an Example is read.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Union

from transforms.record_types import KEY

BYTES, INT64, FLOAT = "bytes", "int64", "float"
FEATURE_TYPES = (BYTES, INT64, FLOAT)
_ALIASES = {
    "bytes": BYTES,
    "str": BYTES,
    "string": BYTES,
    "int": INT64,
    "int64": INT64,
    "float": FLOAT,
    "float32": FLOAT,
}

#: the ``Feature`` field (its ``kind``) holding each type's values
LIST_FIELD = {BYTES: "bytes_list", INT64: "int64_list", FLOAT: "float_list"}


def parse_type_map(spec: Union[None, str, Mapping[str, str]]) -> Dict[str, str]:
    """``"cls:int64,jpg:bytes"`` or a mapping (go-tfdata FeatureType names accepted)."""
    if not spec:
        return {}
    if isinstance(spec, str):
        items = []
        for part in spec.split(","):
            if not part.strip():
                continue
            name, sep, typ = part.partition(":")
            if not sep:
                raise ValueError(f"type map entry {part!r} is not name:type")
            items.append((name.strip(), typ.strip()))
    else:
        items = list(spec.items())
    out = {}
    for name, typ in items:
        if not name or name == KEY:
            raise ValueError(
                f"type map entry {name!r}:{typ!r}: the name must be a feature name "
                f"(an extension such as cls), not empty or {KEY}"
            )
        if name in out:
            raise ValueError(f"type map names {name!r} twice")
        t = _ALIASES.get(str(getattr(typ, "value", typ)).lower())
        if t is None:
            raise ValueError(
                f"unknown feature type {typ!r} for {name!r}; use one of {FEATURE_TYPES}"
            )
        out[name] = t
    return out


def unmatched_types(type_map: Mapping[str, str], schema: Mapping[str, Any]) -> List[str]:
    """The type map's names that no written feature has (a misspelt name, or a field a
    selection stored under another name): they were asked for and typed nothing."""
    return sorted(n for n in type_map if n not in schema)


def _wire_pb2():
    from transforms.tfrecord import example_wire_pb2

    return example_wire_pb2


def schema_of(serialized: bytes) -> Dict[str, Dict[str, Any]]:
    """Feature name -> {dtype, shape} as seen in one serialized Example."""
    return schema_of_message(_wire_pb2().Example.FromString(serialized))


_KINDS = {field: typ for typ, field in LIST_FIELD.items()}  # Feature.kind -> type


def schema_of_message(ex) -> Dict[str, Dict[str, Any]]:
    """:func:`schema_of` for an Example message (tar2tf's wire class or TensorFlow's)."""
    out = {}
    for name, f in ex.features.feature.items():
        kind = f.WhichOneof("kind")
        out[name] = {
            "dtype": _KINDS.get(kind, "none"),
            "shape": [len(getattr(f, kind).value) if kind else 0],
        }
    return out


def merge_schema(
    a: Dict[str, Dict[str, Any]], b: Dict[str, Dict[str, Any]]
) -> Dict[str, Dict[str, Any]]:
    """Union of two schemas; a feature whose length differs gets shape [-1] (variable)."""
    out = {k: dict(v) for k, v in a.items()}
    for name, spec in b.items():
        if name not in out:
            out[name] = dict(spec)
        else:
            cur = out[name]
            if cur["dtype"] != spec["dtype"]:
                cur["dtype"] = "mixed"
            if cur["shape"] != spec["shape"]:
                cur["shape"] = [-1]
    for name in set(out) - set(b):
        out[name]["optional"] = True
    for name in set(b) - set(a):
        if a:
            out[name]["optional"] = True
    return dict(sorted(out.items()))


def first_types(
    schema: Mapping[str, Mapping[str, Any]], firsts: Iterable[Mapping[str, str]]
) -> Dict[str, str]:
    """For each feature the schema calls ``mixed``: the type of the first record in input
    order that has it.  ``firsts``: each piece's own first types (feature -> dtype), in
    input order (by piece index, whichever worker finished them first)."""
    out: Dict[str, str] = {}
    mixed = [n for n, s in schema.items() if s.get("dtype") == "mixed"]
    for first in firsts:
        for name in mixed:
            t = first.get(name)
            if name not in out and t in FEATURE_TYPES:
                out[name] = t
    return out


def retype(
    type_map: Union[None, str, Mapping[str, str]], schema: Mapping[str, Mapping[str, Any]]
) -> Dict[str, str]:
    """The type map to convert again with, when the manifest ``schema`` has features whose
    records disagreed on their type (``mixed``, with the type of the first one in input
    order as ``first_dtype``): the job's own type map plus those.  Empty: nothing to do."""
    tm = parse_type_map(type_map)
    # a feature the type map already names cannot be typed any further (a custom encoder
    # wrote it): no second pass, which would end the same way
    add = {
        n: s["first_dtype"]
        for n, s in schema.items()
        if s.get("dtype") == "mixed" and s.get("first_dtype") in FEATURE_TYPES and n not in tm
    }
    return {**tm, **add} if add else {}


def tf_feature_spec(schema: Mapping[str, Mapping[str, Any]]):
    """A ``tf.io.parse_single_example`` spec from a manifest schema."""
    import tensorflow as tf

    spec = {}
    for name, s in schema.items():
        dtype = {BYTES: tf.string, INT64: tf.int64, FLOAT: tf.float32}.get(s["dtype"])
        if dtype is None:
            continue
        shape = s.get("shape", [-1])
        if s.get("optional") or shape == [-1]:
            spec[name] = tf.io.VarLenFeature(dtype)
        else:
            spec[name] = tf.io.FixedLenFeature(shape if shape != [1] else [], dtype)
    return spec
