"""Records to ``tf.train.Example`` and back: the encoding (a protobuf message, or its
wire bytes written directly) and :func:`parse_example`.  The feature types, the type map
and the schema are :mod:`transforms.tfrecord.schema`'s.

Default encoding is lossless: one ``bytes`` feature per extension, named by the
extension, plus ``__key__``.  A *type map* (``{"cls": "int64", "score": "float"}``, or the
CLI's ``cls:int64,score:float``) makes typed features; a value that does not fit its type
raises :class:`EncodeError`, which drivers turn into an ``encode`` reject -- it never
becomes a silently wrong number.

Arrays (what ``Decode``/``Resize`` produce) are stored as three features:
``<name>`` raw little-endian bytes, ``<name>/shape`` int64 list (empty for a 0-d
array), ``<name>/dtype`` bytes (numpy's dtype name, which is TensorFlow's).  Two kinds of
array have no raw bytes that mean anything outside the process, so their values are
listed instead, in C order:
arrays of bytes or str (numpy ``object``/``S``/``U``: ``tobytes()`` would write pointers)
as a bytes list (str as UTF-8) with ``<name>/dtype`` ``b"string"`` (TensorFlow's name for
the ``tf.string`` they are in memory), and bool arrays as an int64 list of 0/1 with
``<name>/dtype`` ``b"bool"`` (``tf.io.decode_raw`` has no bool).  A single bool is an
int64 0/1 feature, as a single integer is; its text (``b"True"``) would parse as nothing.

Examples are serialized with ``deterministic=True`` so that map ordering never makes two
runs differ.
"""

from __future__ import annotations

import numbers
import struct
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from transforms import lazynp
from transforms.record_types import KEY, META_KEYS, Record
from transforms.tfrecord.schema import (
    BYTES,
    FLOAT,
    INT64,
    schema_of,
    schema_of_message,
)
from transforms.tfrecord.schema import LIST_FIELD as _LIST_FIELD


class EncodeError(ValueError):
    """A record value that cannot be encoded as asked."""


def _example_pb2():
    # TensorFlow's own classes, for the public API (``record_to_example`` returns a
    # ``tf.train.Example``) and example stages; imported lazily: importing TensorFlow costs
    # seconds and hundreds of MB, which the default encoding path never pays.
    from tensorflow.core.example import example_pb2

    return example_pb2


def _as_ints(name: str, value: Any) -> List[int]:
    if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:  # a label: no trip through numpy
        return [value]
    if type(value) is bool:
        return [int(value)]
    if isinstance(value, (bytes, bytearray, str)):
        text = value.decode("ascii", "strict") if isinstance(value, (bytes, bytearray)) else value
        try:
            vals = [int(tok) for tok in text.replace(",", " ").split()]
        except ValueError:
            _fail(name, value, INT64)
        # a 20-digit id is whole but no int64: refused here, as a number would be, rather
        # than by protobuf's ValueError when the message is built
        if not vals or not all(_INT64_MIN <= v <= _INT64_MAX for v in vals):
            _fail(name, value, INT64)
        return vals
    import numpy as np

    arr = np.asarray(value)
    if arr.dtype.kind in "iub":
        return [int(v) for v in arr.reshape(-1)]
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # inf and nan are not whole: they fail below, quietly
            whole = np.all(np.equal(np.mod(arr, 1), 0))
        if whole:
            return [int(v) for v in arr.reshape(-1)]
    _fail(name, value, INT64)


def _as_floats(name: str, value: Any) -> List[float]:
    if type(value) is float:
        return [value]
    if isinstance(value, (bytes, bytearray, str)):
        text = value.decode("ascii", "strict") if isinstance(value, (bytes, bytearray)) else value
        try:
            vals = [float(tok) for tok in text.replace(",", " ").split()]
        except ValueError:
            _fail(name, value, FLOAT)
        return vals or _fail(name, value, FLOAT)
    import numpy as np

    arr = np.asarray(value)
    if arr.dtype.kind in "iubf":
        return [float(v) for v in arr.reshape(-1)]
    _fail(name, value, FLOAT)


def _fail(name, value, typ):
    if isinstance(value, float) and typ == INT64:  # nan, inf, 2.5: no integer holds them
        raise EncodeError(
            f"value does not fit type: '{name}' is not {typ} ({value!r} is no whole finite number)"
        )
    shown = value[:40] if isinstance(value, (bytes, str)) else type(value).__name__
    raise EncodeError(f"value does not fit type: '{name}' is not {typ} ({shown!r})")


def _element_bytes(name: str, value: Any) -> bytes:
    """One element of an array of strings (``object``, ``S`` or ``U``) as bytes."""
    if isinstance(value, bytes):  # numpy.bytes_ too
        return bytes(value)
    if isinstance(value, str):  # numpy.str_ too
        return value.encode("utf-8")
    raise EncodeError(
        f"value does not fit type: '{name}' is an object array holding "
        f"{type(value).__name__}, not only bytes or str"
    )


def _as_bytes(name: str, value: Any) -> List[bytes]:
    if isinstance(value, (bytes, bytearray)):
        return [bytes(value)]
    if isinstance(value, str):
        return [value.encode("utf-8")]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bytes, str)) for v in value):
        return [v.encode("utf-8") if isinstance(v, str) else v for v in value]
    if isinstance(value, numbers.Number):
        return [str(value).encode("ascii")]
    _fail(name, value, BYTES)


def _features(record: Record, type_map: Mapping[str, str]):
    """``(name, type, values)`` of the default encoding's features, in the order they are
    built: ``__key__``, then the record's entries by name (an array as three features)."""
    # the key's bytes as in the tar, also a name that is no UTF-8 (decoded with surrogateescape)
    yield KEY, BYTES, [str(record[KEY]).encode("utf-8", "surrogateescape")]
    # numpy is not imported here: while nothing else has imported it (a passthrough
    # worker), no value can be a numpy array or scalar (transforms.lazynp)
    np = lazynp.loaded()
    ints, floats = (
        ((int, np.integer, np.bool_), (float, np.floating))
        if np is not None
        else ((int,), (float,))
    )
    for name in sorted(record):
        if name in META_KEYS:
            continue
        value = record[name]
        if np is not None and isinstance(value, np.ndarray) and name not in type_map:
            # (ascontiguousarray makes a 0-d array 1-d: its shape is stored as [], not [1])
            arr = np.ascontiguousarray(value) if value.ndim else value
            kind = arr.dtype.kind
            if kind in "OSU":
                yield name, BYTES, [_element_bytes(name, v) for v in arr.reshape(-1).tolist()]
                dtype = b"string"
            elif kind == "b":
                yield name, INT64, [int(v) for v in arr.reshape(-1).tolist()]
                dtype = b"bool"
            else:
                le = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
                yield name, BYTES, [le.tobytes()]
                dtype = arr.dtype.name.encode()
            yield name + "/shape", INT64, [int(d) for d in arr.shape]
            yield name + "/dtype", BYTES, [dtype]
            continue
        # bool is an int (0/1) here, as in numpy and TensorFlow casts
        typ = type_map.get(
            name,
            INT64 if isinstance(value, ints) else FLOAT if isinstance(value, floats) else BYTES,
        )
        convert = _as_ints if typ == INT64 else _as_floats if typ == FLOAT else _as_bytes
        yield name, typ, convert(name, value)


def _wire_pb2():
    """:mod:`transforms.tfrecord.example_wire_pb2`, imported on first use: the direct writer needs no
    protobuf, and a shard worker process starts ~15 ms sooner without it."""
    from transforms.tfrecord import example_wire_pb2

    return example_wire_pb2


def record_to_example(record: Record, type_map: Optional[Mapping[str, str]] = None):
    """The default encoding as a ``tf.train.Example``: see the module docstring."""
    return _build(_example_pb2().Example(), record, type_map)


def _build(ex, record: Record, type_map: Optional[Mapping[str, str]]):
    """Fill an empty Example message (TensorFlow's class or :mod:`example_wire_pb2`'s)."""
    feats = ex.features
    for name, typ, vals in _features(record, type_map or {}):
        getattr(feats.feature[name], _LIST_FIELD[typ]).value.extend(vals)
    return ex


# -- the default encoding written directly -----------------------------------------------
#
# Building a protobuf message per record and serializing it was half of a passthrough
# record's Python time (~25 of ~50 us), and the converter holds the GIL meanwhile.  For the
# common records the bytes are written here, in the wire format of example_wire.proto
# with protobuf's deterministic map order (see _name); anything unusual
# (an empty list, a name that two entries would share, a number outside its wire type)
# returns None and takes the message path.  Byte-identical to it: property-tested.
# The bytes come as parts (_wire_parts) that the framing joins once: joining each nesting
# level (list, Feature, map entry, Features, Example) copied a 50 kB JPEG six more times,
# and from memory, not cache: 24 -> 11 us per passthrough record (benchmark shards).

_TAG_LIST = {BYTES: b"\x0a", FLOAT: b"\x12", INT64: b"\x1a"}  # Feature.kind field tags
_U64 = 1 << 64
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


_VARINT1 = tuple(bytes((i,)) for i in range(0x80))


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _VARINT1[n]
    if n < 0x4000:  # lengths of up to 16 kB
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:  # up to 2 MB: an image
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _list_parts(typ: str, vals: List[Any]) -> Optional[Tuple[List[bytes], int]]:
    """A BytesList / FloatList / Int64List message (field 1; numbers packed) as parts to
    concatenate, and its length: values are referenced here, not copied."""
    if typ == BYTES:
        parts: List[bytes] = []
        n = 0
        for v in vals:
            head = b"\x0a" + _varint(len(v))
            parts += (head, v)
            n += len(head) + len(v)
        return parts, n
    if typ == FLOAT:
        try:
            packed = struct.pack(f"<{len(vals)}f", *vals)
        except (OverflowError, struct.error):
            return None
    else:
        if any(v < _INT64_MIN or v > _INT64_MAX for v in vals):
            return None
        packed = b"".join(_varint(v % _U64) for v in vals)
    head = b"\x0a" + _varint(len(packed))
    return [head, packed], len(head) + len(packed)


_NAMES: Dict[str, Tuple[bytes, bytes]] = {}  # feature name -> (sort key, entry key prefix)


def _name(name: str) -> Tuple[bytes, bytes]:
    """A feature name's map order key and its entry's bytes up to the Feature (cached)."""
    got = _NAMES.get(name)
    if got is None:
        key = name.encode("utf-8")
        # protobuf's (upb) deterministic map order: by key bytes, except that a key sorts
        # after the longer keys it is a prefix of ("jpg/shape" before "jpg"); 0xff never
        # occurs in UTF-8, so it stands in for "ends here"
        got = (key + b"\xff", b"\x0a" + _varint(len(key)) + key + b"\x12")
        if len(_NAMES) < 4096:
            _NAMES[name] = got
    return got


def _wire_parts(record: Record, type_map: Optional[Mapping[str, str]]):
    """``(parts, schema)`` of the default encoding -- the serialized Example is
    ``b"".join(parts)`` -- or None (see above).  Every length is known before a byte is
    joined, so a record's values (a 100 kB JPEG) are copied once, by whoever joins the
    parts (the TFRecord framing), not once per nesting level of the message."""
    feats = [
        (_name(name), name, typ, vals) for name, typ, vals in _features(record, type_map or {})
    ]
    feats.sort(key=_map_order)
    parts: List[bytes] = [b""]  # [0]: Example field 1's header, once its length is known
    out_schema, last, total = {}, None, 0
    for (order, key_head), name, typ, vals in feats:
        if order == last or not vals:
            return None
        last = order
        body = _list_parts(typ, vals)
        if body is None:
            return None
        body_parts, body_len = body
        # a Features.feature map entry {1: key, 2: Feature{kind: the list}}: its headers
        feature_head = _TAG_LIST[typ] + _varint(body_len)
        feature_len = len(feature_head) + body_len
        inner = key_head + _varint(feature_len)
        head = b"\x0a" + _varint(len(inner) + feature_len) + inner + feature_head
        parts.append(head)
        parts += body_parts
        total += len(head) + body_len
        out_schema[name] = {"dtype": typ, "shape": [len(vals)]}
    parts[0] = b"\x0a" + _varint(total)
    return parts, out_schema


def _map_order(feat) -> bytes:
    return feat[0][0]


def serialize(example) -> bytes:
    return example.SerializeToString(deterministic=True)


def encode_record(
    record: Record,
    type_map: Optional[Mapping[str, str]] = None,
    to_example: Optional[Callable[[Record], Any]] = None,
) -> bytes:
    """Record -> serialized Example; ``to_example`` overrides the default encoding.

    A custom ``to_example`` may return a ``tf.train.Example`` or already-serialized bytes.
    The default encoding writes the wire bytes of common records directly (:func:`_wire_parts`)
    and builds tar2tf's own copy of the message for the rest (same bytes either way, no
    TensorFlow import: see ``example_wire.proto``).
    """
    return encode_with_schema(record, type_map, to_example, schema=False)[0]


def encode_with_schema(
    record: Record,
    type_map: Optional[Mapping[str, str]] = None,
    to_example: Optional[Callable[[Record], Any]] = None,
    schema: bool = True,
    parts: bool = False,
) -> Tuple[Union[bytes, List[bytes]], Optional[Dict[str, Dict[str, Any]]]]:
    """:func:`encode_record` plus the Example's :func:`schema_of`, read from the message
    before it is serialized (no parse back), or None with ``schema=False``.  With
    ``parts=True`` the Example comes as a list of bytes to concatenate (see
    :func:`_wire_parts`; a single element where the message path serialized it)."""
    if to_example is None:
        direct = _wire_parts(record, type_map)
        if direct is not None:
            return (direct[0] if parts else b"".join(direct[0])), (direct[1] if schema else None)
        msg = _build(_wire_pb2().Example(), record, type_map)
    else:
        msg = to_example(record)
        if isinstance(msg, (bytes, bytearray)):
            data = bytes(msg)
            return ([data] if parts else data), (schema_of(data) if schema else None)
        if msg is None or not hasattr(msg, "SerializeToString"):
            raise EncodeError(
                f"record_to_example returned {type(msg).__name__}, not a tf.train.Example"
            )
    data = serialize(msg)
    return ([data] if parts else data), (schema_of_message(msg) if schema else None)


# -- parsing back -----------------------------------------------------------------------


def parse_example(serialized: bytes) -> Record:
    """Serialized Example -> record dict, undoing :func:`record_to_example`.

    Array features (``x`` + ``x/shape`` + ``x/dtype``) come back as ndarrays (strings as
    an ``object`` array of bytes, as a selection makes them); one-element int/float lists
    come back as scalars; bytes stay bytes.
    """
    import numpy as np

    ex = _wire_pb2().Example.FromString(serialized)
    fmap = ex.features.feature
    rec: Record = {}
    for name in sorted(fmap):
        if name.endswith("/shape") or name.endswith("/dtype"):
            continue
        f = fmap[name]
        kind = f.WhichOneof("kind")
        vals = list(getattr(f, kind).value) if kind else []
        has_companions = (
            name + "/shape" in fmap and name + "/dtype" in fmap
        )  # (indexing would add them)
        stored = fmap[name + "/dtype"].bytes_list.value[:1] if has_companions else []
        shape = tuple(fmap[name + "/shape"].int64_list.value) if stored else ()
        if stored and stored[0] == b"string" and kind == "bytes_list":
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
            rec[name] = _shaped(arr, shape)
        elif stored and stored[0] == b"bool" and kind == "int64_list":
            rec[name] = _shaped(np.asarray(vals, dtype=bool), shape)
        elif stored and kind == "bytes_list":
            dtype = np.dtype(stored[0].decode()).newbyteorder("<")
            rec[name] = _shaped(np.frombuffer(vals[0], dtype=dtype), shape).astype(
                dtype.newbyteorder("=")
            )
        elif name == KEY:
            rec[name] = vals[0].decode("utf-8", "surrogateescape") if vals else ""
        elif kind == "bytes_list":
            rec[name] = vals[0] if len(vals) == 1 else vals
        else:
            rec[name] = vals[0] if len(vals) == 1 else np.asarray(vals)
    return rec


def _shaped(flat, shape: Tuple[int, ...]):
    """The flat values of an array feature in their stored shape.  An empty shape is a
    0-d array's (one value); older files stored a 0-d array's shape as ``[1]``, which
    still reads back as the 1-element array it says.  An empty shape over other than one
    value (a custom encoder's) leaves the values flat."""
    if not shape and flat.size != 1:
        return flat
    return flat.reshape(shape)
