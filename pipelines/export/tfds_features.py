"""TFDS features typed from a tar2tf manifest's schema (:mod:`pipelines.export.tfds`
writes them into a dataset's metadata).

A schema entry (dtype, shape, optional) becomes a ``Tensor`` feature of a fixed or
variable length; the names the user lists (``--tfds-image``) become ``Image`` features; a
``/`` in a name nests it, as TFDS names nested features in Examples.  The mapping and its
reasons are in docs/tfds.md.  TFDS itself is imported only by :func:`to_tfds`.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from transforms.tfrecord.schema import BYTES, FLOAT, INT64

log = logging.getLogger("tar2tf")

#: channels of a --tfds-image feature, decoded as tf.image.decode_image does
IMAGE_CHANNELS = (1, 3, 4)
Spec = Tuple[Any, ...]  # ("image", channels) or ("tensor", dtype, shape)


class TfdsError(ValueError):
    """The output cannot be described for TFDS: one line that says why."""


def parse_image(spec: Union[None, str, Sequence[str]]) -> Dict[str, int]:
    """``"jpg,png:1"`` (or a list of such entries) -> feature name -> channels (default 3)."""
    if not spec:
        return {}
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: Dict[str, int] = {}
    for item in items:
        if not isinstance(item, str):
            raise TfdsError(f"--tfds-image entries are feature names, not {item!r}")
        name, sep, channels = item.strip().partition(":")
        if not name:
            continue
        if sep and channels not in tuple(str(c) for c in IMAGE_CHANNELS):
            raise TfdsError(
                f"--tfds-image {item.strip()}: channels must be one of {IMAGE_CHANNELS}"
            )
        out[name] = int(channels) if sep else 3
    return out


def image_checks(spec: Union[None, str, Sequence[str]]) -> List[Any]:
    """The stages that check each ``--tfds-image`` feature of every record as TFDS will
    decode it (:class:`transforms.ops.image_check.TfdsImage`), to run after the job's own
    stages: a record TFDS could not decode is a reject, not a split ``as_dataset`` fails on."""
    from transforms.ops.image_check import TfdsImage

    return [TfdsImage(name, channels) for name, channels in parse_image(spec).items()]


def feature_specs(
    schema: Mapping[str, Mapping[str, Any]], image: Union[None, str, Sequence[str]] = None
) -> Dict[str, Spec]:
    """Manifest schema -> feature name -> ``("tensor", dtype, shape)`` or ``("image", channels)``.

    One value in every record: a scalar, shape ``()``.  The same number n > 1 in every record:
    shape ``(n,)``.  A number that varies, or a feature some records lack: shape ``(None,)``,
    which TFDS reads as a variable-length vector, empty where the feature is missing (TFDS's
    optional scalars would return a sentinel such as the smallest int64 instead).  Bytes
    stay bytes (a ``tf.string`` tensor); the names in ``image`` become ``Image`` features.
    """
    images = parse_image(image)
    names = set(schema)
    for n in images:
        s = schema.get(n)
        if s is None:
            raise TfdsError(
                f"--tfds-image {n}: no such feature was written "
                f"(written: {', '.join(sorted(names))})"
            )
        if s.get("dtype") != BYTES or s.get("shape") != [1] or s.get("optional"):
            raise TfdsError(
                f"--tfds-image {n}: TFDS Image needs one encoded image in every record; "
                f"{n} is {s.get('dtype')} with shape {s.get('shape')}"
                + (", missing from some records" if s.get("optional") else "")
            )
    arrays = sorted(n for n in names if f"{n}/shape" in names and f"{n}/dtype" in names)
    if arrays:
        n = arrays[0]
        raise TfdsError(
            f"--tfds: {n!r} is an array (raw bytes + {n}/shape + {n}/dtype), which TFDS "
            f"features cannot describe; encode it to PNG or JPEG (an Encode op) and use "
            f"--tfds-image {n}"
        )
    out: Dict[str, Spec] = {}
    for name, s in sorted(schema.items()):
        if name in images:
            out[name] = ("image", images[name])
            continue
        dtype, shape = s.get("dtype"), list(s.get("shape") or [-1])
        if dtype == "none":  # a feature with no value list in any record: nothing to read
            log.warning("--tfds: feature %r holds no values; it is left out of the features", name)
            continue
        if dtype not in (BYTES, INT64, FLOAT):
            raise TfdsError(f"--tfds: feature {name!r} has values of several types ({dtype})")
        if s.get("optional") or shape in ([-1], [0]):
            dims: Tuple[Optional[int], ...] = (None,)
        elif shape == [1]:
            dims = ()
        else:
            dims = (int(shape[0]),)
        out[name] = ("tensor", dtype, dims)
    return out


def nest(flat: Mapping[str, Spec]) -> Dict[str, Any]:
    """TFDS names nested features ``a/b`` in Examples: a flat name with ``/`` becomes nested;
    a name that is both a feature and a prefix of another cannot be described."""
    root: Dict[str, Any] = {}
    for name in sorted(flat):  # "a" before "a/b"
        parts = name.split("/")
        node = root
        for i, p in enumerate(parts):
            clash = not p or (i < len(parts) - 1 and not isinstance(node.get(p, {}), dict))
            if clash or (i == len(parts) - 1 and p in node):
                raise TfdsError(
                    f"--tfds: feature name {name!r} does not fit TFDS's nesting of names by '/'"
                )
            if i < len(parts) - 1:
                node = node.setdefault(p, {})
        node[parts[-1]] = flat[name]
    return root


def to_tfds(nested: Mapping[str, Any]):
    """:func:`nest`'s dict -> a ``tfds.features.FeaturesDict``."""
    import numpy as np
    import tensorflow_datasets as tfds

    dtypes = {BYTES: np.object_, INT64: np.int64, FLOAT: np.float32}

    def one(v):
        if isinstance(v, dict):
            return tfds.features.FeaturesDict({k: one(x) for k, x in v.items()})
        if v[0] == "image":
            return tfds.features.Image(shape=(None, None, v[1]))
        return tfds.features.Tensor(shape=v[2], dtype=dtypes[v[1]])

    return one(dict(nested))
