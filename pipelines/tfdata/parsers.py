"""Parse TFRecords written by ``Dataset.load(path=...)`` / ``tar2tf convert --ops`` back
into the same datapoints as in-memory mode.

* :func:`default_record_parser` reads the default layout (``value`` + ``label``) into
  ``(float32 H x W x C image, int32 label)``: a raw uint8 array (``value`` + ``value/shape``
  + ``value/dtype``) is converted with ``tf.image.convert_image_dtype`` -- the same
  arithmetic as ``Convert`` -- float arrays are kept, and encoded JPEG/PNG/BMP bytes are
  decoded.  This is what the default in-memory dataset yields.
* :func:`make_record_parser` takes an element spec (``tf.TensorSpec`` structure, e.g.
  ``Dataset.element_spec``) and returns exactly those dtypes and shapes, for any
  selections (dict / tuple values become ``value.<name>`` features).  An array's stored
  ``<name>/dtype`` is checked against the spec: raw bytes are only ever read as the dtype
  they were written as.  The one difference it bridges is uint8 pixels under a float
  spec: the default dataset's image (float32 in memory, stored as uint8, 4x smaller), or
  an image whose dtype ``output_types`` changed; both are converted with
  ``tf.image.convert_image_dtype``, as the in-memory element is
  (``transforms.ops.element_spec.fit``); any other difference fails, naming both dtypes
  (reading float32 bytes as uint8, or the reverse, would give a wrong tensor or a
  reshape error far from its cause).  Arrays of strings (a bytes list) and bools (an
  int64 list of 0/1) are stored as values, not bytes: see ``transforms.tfrecord.example``.  A
  rank-0 number may be stored as one feature value or as a 0-d array; both are read.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

_RAW_DTYPES = (
    "uint8",
    "uint16",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
)


def _tf():
    from pipelines.tfdata.tfquiet import tensorflow

    return tensorflow()  # its devices initialized without a driverless machine's cuInit line


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
        with tf.control_dependencies(
            [tf.debugging.Assert(False, ["unsupported value/dtype", dtype_name])]
        ):
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


def _scalar(s) -> bool:
    """A rank-0 number, bool or string: one feature value, no ``/shape``."""
    return s.shape.rank == 0 and (
        s.dtype.is_integer or s.dtype.is_floating or s.dtype.is_bool or s.dtype == _tf().string
    )


def _either_form(s) -> bool:
    """A rank-0 integer or float, stored either as one feature value (from a Python or
    numpy scalar) or as a 0-d array (raw bytes + ``/dtype`` + an empty ``/shape``): the
    two differ in wire type, so each record's ``/dtype`` says which to read.  (A rank-0
    bool or string needs no choice: both forms are one int64 / bytes value.)"""
    return s.shape.rank == 0 and (s.dtype.is_integer or s.dtype.is_floating) and not s.dtype.is_bool


def _feature_spec(name: str, s) -> Dict[str, Any]:
    tf = _tf()
    if _either_form(s):  # the value itself is parsed once its form is known (_leaf)
        return {name + "/dtype": tf.io.FixedLenFeature([], tf.string, default_value="")}
    if s.shape.rank == 0 and (s.dtype.is_integer or s.dtype.is_bool):  # a bool is an int64 0/1
        return {name: tf.io.FixedLenFeature([], tf.int64)}
    if s.shape.rank == 0 and s.dtype.is_floating:
        return {name: tf.io.FixedLenFeature([], tf.float32)}
    if s.shape.rank == 0 and s.dtype == tf.string:
        return {name: tf.io.FixedLenFeature([], tf.string)}
    shape = {name + "/shape": tf.io.VarLenFeature(tf.int64)}
    if s.dtype == tf.string or s.dtype.is_bool:  # listed values (see the module docstring)
        return {name: tf.io.VarLenFeature(tf.string if s.dtype == tf.string else tf.int64), **shape}
    # the dtype defaults to the spec's for records written without it (a custom encoder)
    return {
        name: tf.io.FixedLenFeature([], tf.string),
        name + "/dtype": tf.io.FixedLenFeature([], tf.string, default_value=s.dtype.name),
        **shape,
    }


def _leaf(f, name, s, serialized):
    tf = _tf()
    if _either_form(s):
        stored = f[name + "/dtype"]

        def scalar():
            typ = tf.float32 if s.dtype.is_floating else tf.int64
            return tf.cast(
                tf.io.parse_single_example(serialized, {name: tf.io.FixedLenFeature([], typ)})[
                    name
                ],
                s.dtype,
            )

        def array():  # one value, whatever shape it was stored with (older files: [1])
            data = tf.io.parse_single_example(
                serialized, {name: tf.io.FixedLenFeature([], tf.string)}
            )[name]
            return _raw_array(data, stored, [], name, s.dtype)

        return tf.cond(tf.equal(stored, ""), scalar, array)
    if _scalar(s):
        return tf.cast(f[name], s.dtype) if s.dtype != tf.string else f[name]
    shape = tf.sparse.to_dense(f[name + "/shape"]) if s.shape.rank != 0 else []
    if s.dtype == tf.string or s.dtype.is_bool:
        values = tf.reshape(tf.sparse.to_dense(f[name]), shape)
        return tf.ensure_shape(values if s.dtype == tf.string else tf.not_equal(values, 0), s.shape)
    return tf.ensure_shape(_raw_array(f[name], f[name + "/dtype"], shape, name, s.dtype), s.shape)


def _raw_array(data, stored, shape, name, dtype):
    """Raw array bytes read as the dtype they were stored as, which must be the spec's
    ``dtype`` -- or uint8 under a float spec, converted (see the module docstring)."""
    tf = _tf()

    def same():
        return tf.reshape(tf.io.decode_raw(data, dtype, little_endian=True), shape)

    branches = [(tf.equal(stored, dtype.name), same)]
    if dtype.is_floating:

        def image():
            arr = tf.reshape(tf.io.decode_raw(data, tf.uint8, little_endian=True), shape)
            return tf.image.convert_image_dtype(arr, dtype)

        branches.append((tf.equal(stored, "uint8"), image))

    def mismatch():
        with tf.control_dependencies(
            [
                tf.debugging.Assert(
                    False,
                    [
                        f"feature {name} is stored as",
                        stored,
                        f"but the element spec says {dtype.name}",
                    ],
                )
            ]
        ):
            return tf.zeros(shape, dtype)

    return tf.case(branches, default=mismatch, exclusive=True)


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
    pair = (
        with_label
        if with_label is not None
        else (isinstance(element_spec, tuple) and len(element_spec) == 2)
    )
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
