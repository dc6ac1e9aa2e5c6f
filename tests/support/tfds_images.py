"""Members a ``--tfds-image`` feature may hold: images TFDS decodes and bytes it cannot
(text, truncated or damaged images, formats TF decodes to frames or not at all, headers
beyond the pixel bound), for the tests of the check that rejects the latter.

Every value is made here, from :mod:`support.shardgen`'s photo crops, so the cases are the
same in every run.
"""

from __future__ import annotations

import io
import struct
from typing import Dict

import numpy as np
from PIL import Image

from support import shardgen


def _save(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def huge_jpeg(width: int = 60000, height: int = 60000) -> bytes:
    """A small JPEG whose frame header claims ``width`` x ``height``: no pixel data fills it."""
    data = bytearray(shardgen.jpeg(7, (32, 24)))
    i = 2
    while data[i] == 0xFF and data[i + 1] not in (0xC0, 0xC1, 0xC2):
        i += 2 + struct.unpack(">H", data[i + 2 : i + 4])[0]
    data[i + 5 : i + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def cases() -> Dict[str, bytes]:
    """name -> bytes, images of every format and mode TF's decoders meet, and damage."""
    rgb = Image.fromarray(shardgen.image_array(3, (40, 30)))
    out: Dict[str, bytes] = {}
    for mode in ("L", "RGB", "CMYK"):
        out[f"jpeg-{mode}"] = _save(rgb.convert(mode), "JPEG", quality=90)
    out["jpeg-progressive"] = _save(rgb, "JPEG", progressive=True)
    for mode in ("1", "L", "LA", "P", "RGB", "RGBA"):
        out[f"png-{mode}"] = _save(rgb.convert(mode), "PNG")
    out["png-16bit"] = _save(
        Image.fromarray(np.asarray(rgb.convert("L")).astype(np.uint16) * 257), "PNG"
    )
    for mode in ("1", "P", "L", "RGB", "RGBA"):
        out[f"bmp-{mode}"] = _save(rgb.convert(mode), "BMP")
    out["gif"] = _save(rgb.convert("P"), "GIF")
    out["webp"] = _save(rgb, "WEBP")
    out["tiff"] = _save(rgb, "TIFF")
    jpeg = out["jpeg-RGB"]
    out["jpeg-truncated"] = jpeg[: len(jpeg) // 2]
    out["png-truncated"] = out["png-RGB"][:-30]
    out["jpeg-huge-header"] = huge_jpeg()
    out["text"] = b"this is not an image at all\n"
    out["empty"] = b""
    return out


#: names of :func:`cases` TFDS cannot decode at any channel count
NEVER = (
    "gif",
    "webp",
    "tiff",
    "jpeg-truncated",
    "png-truncated",
    "jpeg-huge-header",
    "text",
    "empty",
    "bmp-1",
)
