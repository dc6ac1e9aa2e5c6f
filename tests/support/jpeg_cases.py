"""The JPEGs both image decoders are held to (tests/unit/test_jpeg_codec.py and
test_numpy_codec.py): the layouts camera and web JPEGs come in, and the DCT-domain
scales a decoder may use."""

from __future__ import annotations

import io

from PIL import Image

from support import shardgen


def jpeg(img: Image.Image, **kw) -> bytes:
    """``img`` saved by Pillow as a JPEG with ``kw``."""
    buf = io.BytesIO()
    img.save(buf, "JPEG", **kw)
    return buf.getvalue()


def photo(w: int, h: int, n: int = 0) -> Image.Image:
    """A photo-like test image ``n`` of ``w`` x ``h``."""
    return Image.fromarray(shardgen.image_array(n, (w, h)))


def _cases():
    """(name, jpeg bytes): the layouts camera and web JPEGs come in."""
    out = []
    for n, (w, h) in enumerate(((500, 375), (375, 500), (333, 251), (97, 61), (640, 427))):
        img = photo(w, h, n)
        out += [
            (f"{w}x{h}-420-q90", jpeg(img, quality=90)),
            (f"{w}x{h}-422-q75", jpeg(img, quality=75, subsampling=1)),
            (f"{w}x{h}-444-q95", jpeg(img, quality=95, subsampling=0)),
            (f"{w}x{h}-progressive", jpeg(img, quality=85, progressive=True)),
            (f"{w}x{h}-optimized", jpeg(img, quality=80, optimize=True)),
            (f"{w}x{h}-gray", jpeg(img.convert("L"), quality=90)),
        ]
    exif = Image.Exif()
    exif[274] = 6  # rotated 90 degrees: decode transposes to upright
    out.append(("exif-rotated", jpeg(photo(320, 200, 7), quality=90, exif=exif.tobytes())))
    restart = photo(256, 192, 8)
    out.append(("restart-markers", jpeg(restart, quality=90, restart_marker_rows=2)))
    return out


CASES = _cases()

# full size, and draft hints that make Pillow pick 1/2, 1/4 and 1/8 scale for 500x375
DRAFTS = [None, (224, 168), (112, 84), (56, 42), (32, 32)]
