"""Shared helpers for the PCR tests: real photos (scikit-image) at small sizes, ImageFolder
trees, tar shards, and the jpegtran requirement."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from typing import Dict, Iterable, Optional, Tuple

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from PIL import Image

JPEGTRAN_MISSING = shutil.which("jpegtran") is None
# a skip for it fails the test in CI (tests/conftest.py), whose set-up installs jpegtran
JPEGTRAN_REASON = (
    "!!! jpegtran NOT FOUND: PCR conversion needs it; run `bash launch/setup.d/20-apt.sh` "
    "(apt-get install libjpeg-turbo-progs) !!!"
)
requires_jpegtran = pytest.mark.skipif(JPEGTRAN_MISSING, reason=JPEGTRAN_REASON)


def need_jpegtran() -> None:
    """Skip the calling test (from inside it, or a fixture) when jpegtran is missing."""
    if JPEGTRAN_MISSING:
        pytest.skip(JPEGTRAN_REASON)


PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "immunohistochemistry")


def photo(name: str, size: Tuple[int, int], mode: str = "RGB") -> Image.Image:
    import skimage.data

    return Image.fromarray(getattr(skimage.data, name)()).resize(size, Image.BILINEAR).convert(mode)


def encode(img: Image.Image, fmt: str = "JPEG", exif: Optional[bytes] = None, **kw) -> bytes:
    out = io.BytesIO()
    if exif is not None:
        kw["exif"] = exif
    img.save(out, fmt, **({"quality": 88} if fmt == "JPEG" and "quality" not in kw else {}), **kw)
    return out.getvalue()


def exif_orientation(value: int) -> bytes:
    ex = Image.Exif()
    ex[0x0112] = value
    return ex.tobytes()


def decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im)


def jpeg_of(pieces) -> bytes:
    """The JPEG a PCR reader gets from scan pieces 1..k: their concatenation, then EOI."""
    from transforms.pcr.jpeg_scans import EOI

    return b"".join(pieces) + EOI


def make_image_folder(root: str, files: Dict[str, bytes]) -> str:
    """``files`` maps ``class/name`` to bytes."""
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return root


def make_tar(path: str, records: Iterable[Tuple[str, Dict[str, bytes]]]) -> str:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for key, fields in records:
            for ext, data in fields.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
                tf.addfile(ti, io.BytesIO(data))
    return path


def sample_images() -> Dict[str, bytes]:
    """A small mixed ImageFolder: colour, gray, CMYK JPEGs, odd sizes, a PNG."""
    return {
        "cat/a_colour.jpg": encode(photo("chelsea", (64, 48))),
        "cat/b_gray.jpg": encode(photo("camera", (48, 40), "L")),
        "cat/c_cmyk.jpg": encode(photo("coffee", (56, 40), "CMYK")),
        "dog/d_odd.jpg": encode(photo("astronaut", (37, 29))),
        "dog/e_png.png": encode(photo("rocket", (40, 32)), "PNG"),
        "dog/f_colour.jpg": encode(photo("immunohistochemistry", (80, 64)), quality=75),
    }


def bad_files() -> Dict[str, bytes]:
    good = encode(photo("astronaut", (64, 48)))
    png = encode(photo("coffee", (40, 32)), "PNG")
    return {
        "dog/bad_text.jpg": b"this is not an image at all\n",
        "dog/bad_truncated.jpg": good[: len(good) // 2],
        "dog/bad_png.png": png[: len(png) // 2],
    }


def convert_local(tmp_path, sources, out_name="out", **kw):
    from pipelines.beam.pcr import PcrConfig, convert_pcr

    out = str(tmp_path / out_name)
    kw.setdefault("max_rejects", 1000)
    res = convert_pcr(PcrConfig(sources=sources, output=out, **kw), ["--direct_num_workers=2"])
    return out, res


def sample_output(tmp_path, images_per_record: int = 4):
    """The sample images as an ImageFolder, converted to PCR under ``tmp_path``: (out, result)."""
    need_jpegtran()
    folder = make_image_folder(str(tmp_path / "folder"), sample_images())
    return convert_local(tmp_path, folder, images_per_record=images_per_record)


def reference_classes(syntax: str):
    """The reference PCR messages (``proto2`` or ``proto3``), built from their published
    facts only: field names, numbers and types."""
    fd = descriptor_pb2.FileDescriptorProto(
        name=f"reference_pcr_{syntax}.proto", package=f"ref{syntax}", syntax=syntax
    )
    F = descriptor_pb2.FieldDescriptorProto
    opt = F.LABEL_OPTIONAL
    req = F.LABEL_REQUIRED if syntax == "proto2" else opt
    meta = fd.message_type.add(name="MetadataRecord")
    labels = meta.field.add(name="labels", number=1, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
    if syntax == "proto2":
        labels.options.packed = False
    meta.field.add(name="progressive_levels", number=2, type=F.TYPE_INT32, label=req)
    meta.field.add(name="version", number=3, type=F.TYPE_INT32, label=opt)
    fd.message_type.add(name="ScanGroup").field.add(
        name="image_bytes", number=1, type=F.TYPE_BYTES, label=F.LABEL_REPEATED
    )
    rec = fd.message_type.add(name="RecordOffsetsIndex")
    rec.field.add(name="name", number=1, type=F.TYPE_STRING, label=opt)
    rec.field.add(name="offsets", number=2, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
    fd.message_type.add(name="DatasetOffsetsIndex").field.add(
        name="records",
        number=1,
        type=F.TYPE_MESSAGE,
        label=F.LABEL_REPEATED,
        type_name=f".ref{syntax}.RecordOffsetsIndex",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ref{syntax}.{n}"))
        for n in ("MetadataRecord", "ScanGroup", "RecordOffsetsIndex", "DatasetOffsetsIndex")
    }
