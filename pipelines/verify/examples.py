"""Every record of a shard, in either Example format (TFRecord, ArrayRecord), as
``tar2tf verify`` checks it: a ``tf.train.Example`` whose features match the manifest
schema (names, dtypes, fixed lengths, required features), and, when asked, whose image
features decode with Pillow (a pixel array by its shape instead)."""

from __future__ import annotations

import io
from typing import Any, Dict, Optional

from transforms.ops.image_names import IMAGE_EXTENSIONS

_KINDS = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}


def check_example(payload: bytes, schema: Dict[str, Dict[str, Any]], example_pb2) -> tuple:
    """(key, features, problems) of one serialized Example against the schema."""
    ex = example_pb2.Example.FromString(payload)
    feats = ex.features.feature
    key = None
    if "__key__" in feats and feats["__key__"].bytes_list.value:
        key = feats["__key__"].bytes_list.value[0].decode("utf-8", "replace")
    problems = []
    for name, f in feats.items():
        kind = f.WhichOneof("kind")
        dtype = _KINDS.get(kind, "none")
        n = len(getattr(f, kind).value) if kind else 0
        spec = schema.get(name)
        if spec is None:
            problems.append(f"feature {name!r} ({dtype}) is not in the manifest schema")
            continue
        if spec.get("dtype") not in ("mixed", dtype):
            problems.append(f"feature {name!r} is {dtype}, schema says {spec.get('dtype')}")
        shape = spec.get("shape", [-1])
        if shape != [-1] and [n] != shape:
            problems.append(f"feature {name!r} has {n} values, schema says {shape[0]}")
    for name, spec in schema.items():
        if not spec.get("optional") and name not in feats:
            problems.append(f"required feature {name!r} is missing")
    return key, feats, problems


def decode_image_features(feats, limit_names=IMAGE_EXTENSIONS) -> tuple:
    """(images decoded, problems) of one Example's features named as images."""
    from PIL import Image

    done, problems = 0, []
    for name in sorted(feats):
        if name.lower() not in limit_names or feats[name].WhichOneof("kind") != "bytes_list":
            continue
        if (
            f"{name}/dtype" in feats
        ):  # a pixel array stored under the image's name: checked as an array
            bad = _check_array(feats, name)
            done += bad is None
            problems += [bad] if bad else []
            continue
        for value in feats[name].bytes_list.value:
            try:
                with Image.open(io.BytesIO(value)) as im:
                    im.load()
                done += 1
            except Exception as e:
                problems.append(f"feature {name!r} does not decode: {type(e).__name__}: {e}")
    return done, problems


def _check_array(feats, name: str) -> Optional[str]:
    """An array feature (``name`` raw little-endian bytes, ``name/dtype``, ``name/shape``,
    as transforms.tfrecord.example writes a decoded image): its bytes must fill its shape exactly."""
    dtype = feats[f"{name}/dtype"].bytes_list.value
    shape = list(feats[f"{name}/shape"].int64_list.value) if f"{name}/shape" in feats else None
    data = feats[name].bytes_list.value
    if shape is None or len(dtype) != 1:
        return f"array feature {name!r} lacks its {name}/shape or {name}/dtype"
    if dtype[0] in (b"string", b"bool"):
        return None  # elements, not a buffer: the schema check covers their count
    import numpy as np

    try:
        itemsize = np.dtype(dtype[0].decode()).itemsize
    except (TypeError, ValueError, UnicodeDecodeError):
        return f"array feature {name!r} has an unknown dtype {dtype[0]!r}"
    want = itemsize * int(np.prod(shape, dtype=np.int64))
    got = sum(len(v) for v in data)
    if len(data) != 1 or got != want:
        return (
            f"array feature {name!r} ({dtype[0].decode()}, shape {shape}) holds {got} bytes, "
            f"its shape needs {want}"
        )
    return None


def check_record(n, payload, schema, example_pb2, decode_images, report, add) -> None:
    """Record ``n`` of a shard (a serialized Example) against the schema, its images
    decoded when asked."""
    try:
        key, feats, bad = check_example(payload, schema, example_pb2)
    except Exception as e:
        add("schema", f"not a tf.train.Example: {type(e).__name__}: {e}", n)
        return
    for b in bad:
        add("schema", b, n, key)
    if decode_images:
        done, bad = decode_image_features(feats)
        report.images_decoded += done
        for b in bad:
            add("image", b, n, key)
