"""Parse TFRecords written by ``Dataset.load(path=...)`` / ``tar2tf convert --ops`` back
into the same datapoints as in-memory mode.

* :func:`default_record_parser` reads the default layout (``value`` + ``label``) into
  ``(float32 H x W x C image, int32 label)``: a raw uint8 array (``value`` + ``value/shape``
  + ``value/dtype``) is converted with ``tf.image.convert_image_dtype`` -- the same
  arithmetic as ``Convert`` -- float arrays are kept, and encoded JPEG/PNG/BMP bytes are
  decoded.  This is what the default in-memory dataset yields.
* :func:`make_record_parser` takes an element spec (``tf.TensorSpec`` structure, e.g.
  ``Dataset.element_spec``) and returns exactly those dtypes and shapes, for any
  selections (dict / tuple values become ``value.<name>`` features).  Each number or
  bool is read as its record stored it (``<name>/dtype``; raw bytes are only ever read
  as the dtype they were written as) and then changed to the spec's dtype by the rule
  ``pipelines.datapoints.fit`` applies in memory (so ``output_types`` give the same
  values on every path): uint8 (pixels) under a float spec -- the default dataset's
  image, float32 in memory but stored as uint8, 4x smaller -- is converted with
  ``tf.image.convert_image_dtype``, any other change is ``tf.cast``.  A stored dtype no
  cast reaches (strings under a number spec) fails, naming both dtypes.  Arrays of
  strings (a bytes list) and bools (an int64 list of 0/1) are stored as values, not
  bytes: see ``transforms.example``.  A rank-0 number may be stored as one feature value
  (int64 or float, told apart by its wire type) or as a 0-d array; both are read.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

_RAW_DTYPES = ("uint8", "uint16", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


def _tf():
    import tensorflow as tf
    return tf


def _raw_image_as_float(data, dtype_name, shape):
    """Raw array bytes of any supported dtype -> float32 image (convert_image_dtype)."""
    tf = _tf()
    branches = []
    for name in _RAW_DTYPES:
        def decode(name=name):
            arr = tf.reshape(tf.io.decode_raw(data, tf.as_dtype(name), little_endian=True), shape)
            return tf.image.convert_image_dtype(arr, tf.float32)
        branches.append((tf.equal(dtype_name, name), decode))

    def unsupported():
        with tf.control_dependencies([tf.debugging.Assert(False, ["unsupported value/dtype", dtype_name])]):
            return tf.zeros(shape, tf.float32)
    return tf.case(branches, default=unsupported, exclusive=True)


def default_record_parser(serialized):
    """``tf.data`` map function: serialized Example -> ``(float32 image, int32 label)``."""
    tf = _tf()
    spec = {
        "value": tf.io.FixedLenFeature([], tf.string),
        "value/dtype": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "value/shape": tf.io.VarLenFeature(tf.int64),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    f = tf.io.parse_single_example(serialized, spec)
    shape = tf.sparse.to_dense(f["value/shape"])

    def encoded():
        img = tf.io.decode_image(f["value"], channels=3, expand_animations=False)
        return tf.image.convert_image_dtype(img, tf.float32)

    def raw():
        return _raw_image_as_float(f["value"], f["value/dtype"], shape)

    value = tf.cond(tf.equal(f["value/dtype"], ""), encoded, raw)
    value = tf.ensure_shape(value, [None, None, None])  # images are H x W x C
    return value, tf.cast(f["label"], tf.int32)


def _leaf_names(spec, name: str) -> List[Tuple[str, Any]]:
    if isinstance(spec, dict):
        return [x for k in spec for x in _leaf_names(spec[k], f"{name}.{k}")]
    if isinstance(spec, (tuple, list)):
        return [x for i, s in enumerate(spec) for x in _leaf_names(s, f"{name}.{i}")]
    return [(name, spec)]


def _numeric(s) -> bool:
    """A number or bool leaf: parsed as its record's ``/dtype`` says it was stored (raw
    bytes of any dtype, an int64 list of 0/1 for bools, or one feature value), then fitted
    to the spec's dtype by :func:`_fit` -- the rule ``pipelines.datapoints.fit`` applies
    to the in-memory element."""
    return s.dtype.is_integer or s.dtype.is_floating or s.dtype.is_bool


def _feature_spec(name: str, s) -> Dict[str, Any]:
    tf = _tf()
    if _numeric(s):  # the value itself is parsed once its stored dtype is known (_leaf)
        # a record without /dtype: one feature value under a rank-0 spec; under any other,
        # an array a custom encoder wrote as the spec says (raw bytes, or 0/1 for bools)
        fspec = {name + "/dtype": tf.io.FixedLenFeature([], tf.string,
                                                       default_value="" if s.shape.rank == 0 else s.dtype.name)}
        if s.shape.rank != 0:
            fspec[name + "/shape"] = tf.io.VarLenFeature(tf.int64)
        return fspec
    if s.shape.rank == 0:  # a string
        return {name: tf.io.FixedLenFeature([], tf.string)}
    return {name: tf.io.VarLenFeature(tf.string), name + "/shape": tf.io.VarLenFeature(tf.int64)}


def _fit(arr, dtype):
    """A tensor of its stored dtype -> ``dtype``, as ``pipelines.datapoints.fit`` changes
    an in-memory element: uint8 (pixels) under a float dtype is scaled to [0, 1] with
    ``tf.image.convert_image_dtype``; any other change is ``tf.cast``."""
    tf = _tf()
    if arr.dtype == dtype:
        return arr
    if arr.dtype == tf.uint8 and dtype.is_floating:
        return tf.image.convert_image_dtype(arr, dtype)
    return tf.cast(arr, dtype)


def _is_float_list(serialized, name):
    """Whether feature ``name`` of a serialized Example is a float list (not an int64
    list): a rank-0 number stored as one feature value says its type only on the wire, and
    ``parse_single_example`` fails on a type other than the one asked for."""
    tf = _tf()
    features = tf.io.decode_proto(serialized, "tensorflow.Example", ["features"], [tf.string]).values[0]
    entries = tf.io.decode_proto(tf.reshape(features, []), "tensorflow.Features", ["feature"], [tf.string]).values[0]
    keys, values = tf.io.decode_proto(entries, "tensorflow.Features.FeatureEntry", ["key", "value"],
                                      [tf.string, tf.string]).values
    mine = tf.boolean_mask(tf.reshape(values, [-1]), tf.equal(tf.reshape(keys, [-1]), name))
    # a Feature's first byte is its oneof's tag: 0x12 is field 2, float_list
    return tf.reduce_any(tf.equal(tf.strings.substr(mine, 0, 1), b"\x12"))


def _leaf(f, name, s, serialized):
    tf = _tf()
    if not _numeric(s):
        if s.shape.rank == 0:
            return f[name]
        values = tf.reshape(tf.sparse.to_dense(f[name]), tf.sparse.to_dense(f[name + "/shape"]))
        return tf.ensure_shape(values, s.shape)
    stored = f[name + "/dtype"]
    # one value, whatever shape it was stored with (older files stored a 0-d array as [1])
    shape = [] if s.shape.rank == 0 else tf.sparse.to_dense(f[name + "/shape"])

    def feature(typ, var=False):
        spec = tf.io.VarLenFeature(typ) if var else tf.io.FixedLenFeature([], typ)
        return tf.io.parse_single_example(serialized, {name: spec})[name]

    branches = []
    for dtype_name in _RAW_DTYPES:
        def raw(dtype_name=dtype_name):
            data = tf.io.decode_raw(feature(tf.string), tf.as_dtype(dtype_name), little_endian=True)
            return _fit(tf.reshape(data, shape), s.dtype)
        branches.append((tf.equal(stored, dtype_name), raw))

    def bools():  # an int64 list of 0/1
        return _fit(tf.not_equal(tf.reshape(tf.sparse.to_dense(feature(tf.int64, var=True)), shape), 0), s.dtype)
    branches.append((tf.equal(stored, "bool"), bools))
    if s.shape.rank == 0:
        def scalar():  # one feature value: a Python int or bool is an int64, a float a float
            return tf.cond(_is_float_list(serialized, name), lambda: _fit(feature(tf.float32), s.dtype),
                           lambda: _fit(feature(tf.int64), s.dtype))
        branches.append((tf.equal(stored, ""), scalar))

    def unsupported():
        with tf.control_dependencies([tf.debugging.Assert(False, [
                f"feature {name} is stored as", stored, f"but the element spec says {s.dtype.name}"])]):
            return tf.zeros(shape, s.dtype)
    return tf.ensure_shape(tf.case(branches, default=unsupported, exclusive=True), s.shape)


def _rebuild(spec, name, f, serialized):
    if isinstance(spec, dict):
        return {k: _rebuild(spec[k], f"{name}.{k}", f, serialized) for k in spec}
    if isinstance(spec, (tuple, list)):
        return tuple(_rebuild(s, f"{name}.{i}", f, serialized) for i, s in enumerate(spec))
    return _leaf(f, name, spec, serialized)


def make_record_parser(element_spec, with_label: bool = None):
    """A ``tf.data`` map function giving exactly ``element_spec``: a ``(value, label)``
    tuple of specs, or (``with_label=False``) the value's spec alone.  By default a
    2-tuple is taken as ``(value, label)``."""
    pair = with_label if with_label is not None else (isinstance(element_spec, tuple) and len(element_spec) == 2)
    parts = element_spec if pair else (element_spec,)
    names = ("value", "label")[: len(parts)]
    fspec: Dict[str, Any] = {}
    for name, s in zip(names, parts):
        for leaf_name, leaf_spec in _leaf_names(s, name):
            fspec.update(_feature_spec(leaf_name, leaf_spec))

    def parse(serialized):
        f = _tf().io.parse_single_example(serialized, fspec)
        out = tuple(_rebuild(s, name, f, serialized) for name, s in zip(names, parts))
        return out if pair else out[0]
    return parse

