"""JPEG decode through libjpeg-turbo's TurboJPEG API (``simplejpeg``), pixel-equal to Pillow's.

A part of the ``pillow`` image codec (``TAR2TF_IMAGE_CODEC=pillow``; the default ``numpy``
codec, :mod:`transforms.ops.numpy_codec`, decodes into arrays with ``simplejpeg`` itself),
opt-in there: ``TAR2TF_JPEG_DECODER=turbo``.  Pillow decodes JPEG with libjpeg-turbo too,
through its incremental decoder plugin.
Called bare, TurboJPEG decodes faster than Pillow, but the path a tar2tf op needs --
Pillow's header parse (format check, EXIF orientation), the decode, and the copy into a
Pillow image for the resize and encode that follow -- was not faster than Pillow's decode
on the machine measured (docs/benchmarks.md, "Costs behind design choices"), so it is off
by default.

Both use the same settings: accurate integer IDCT (``JDCT_ISLOW``) and "fancy" (smooth)
chroma upsampling, so the pixels are the same, at full size and in the DCT domain's
reduced sizes (Pillow's ``draft`` scale 1/2, 1/4, 1/8 against TurboJPEG's scaling factor
of the same value).  ``tests/unit/test_jpeg_codec.py`` checks equality on baseline,
progressive, 4:2:0 / 4:2:2 / 4:4:4, grayscale, restart-marker, EXIF-rotated and odd-sized
JPEGs, full size and scaled.

:func:`decode_like_pillow` only takes what it can decode exactly like Pillow: a plain
``JPEG`` (not MPO) in Pillow's mode ``RGB`` or ``L`` whose raw mode is the same (so not
CMYK / Adobe-inverted CMYK, not YCCK), with a scaled size TurboJPEG reproduces.  For
everything else, and whenever TurboJPEG reports any problem with the data (a warning
included), it returns None and the caller decodes with Pillow as before: damaged files
keep Pillow's errors, and a truncated file is not silently grey-filled.
"""

from __future__ import annotations

import os
from typing import Optional

from PIL import Image


def _load():
    """``simplejpeg``, or None when it is not installed (the ``fast-jpeg`` / ``bench`` extras
    are optional: Pillow decodes everything).  Imported only when asked for: it imports
    numpy, which a worker passing records through never needs."""
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


# opt-in: on the machines measured so far the whole path (Pillow's header parse, TurboJPEG,
# the copy into a Pillow image) was not faster than Pillow's own decode (docs/benchmarks.md)
_sj = _load() if os.environ.get("TAR2TF_JPEG_DECODER", "").lower() == "turbo" else None

_MODES = ("RGB", "L")  # Pillow's modes for YCbCr / RGB and grayscale JPEGs
# TurboJPEG's smallest scaling steps are 1/8: below 8 pixels a smaller factor than Pillow's
# can reach the same rounded-up size, so tiny images stay on Pillow
_MIN_SIDE = 16


def available() -> bool:
    """Whether ``simplejpeg`` is installed (the path runs only with ``TAR2TF_JPEG_DECODER=turbo``)."""
    return _load() is not None


def enabled() -> bool:
    return _sj is not None


def decode_like_pillow(img: Image.Image, data) -> Optional[Image.Image]:
    """The pixels Pillow's ``img.load()`` would give, decoded by TurboJPEG, or None.

    ``img`` is a not-yet-loaded ``JpegImageFile`` opened on ``data``, after any ``draft``
    call (its ``size`` is then the reduced size Pillow would decode to)."""
    if _sj is None or img.format != "JPEG" or img.mode not in _MODES:
        return None
    tile = getattr(img, "tile", None)
    if not tile or len(tile) != 1 or tile[0][0] != "jpeg":
        return None
    args = tile[0][3]
    rawmode = args[0] if isinstance(args, tuple) else args
    if rawmode != img.mode:  # CMYK;I, YCbCr kept as such, ...: Pillow's own conversions
        return None
    w, h = img.size
    if min(w, h) < _MIN_SIDE:
        return None
    if not isinstance(data, bytes):
        data = bytes(data)
    scale = getattr(img, "decoderconfig", (1,))
    scale = scale[0] if scale else 1
    # RGB is decoded as RGBX: Pillow keeps RGB pixels in 4-byte slots, so unpacking RGBX into
    # it is a row copy, where 3-byte RGB would be unpacked pixel by pixel
    space = "RGBX" if img.mode == "RGB" else "GRAY"
    try:
        if scale > 1:
            # the smallest TurboJPEG factor giving at least Pillow's reduced size is 1/scale:
            # factors are multiples of 1/8 and for sides >= 8 the next smaller one rounds
            # to a smaller size
            arr = _sj.decode_jpeg(data, colorspace=space, min_width=w, min_height=h, strict=True)
        else:
            arr = _sj.decode_jpeg(data, colorspace=space, strict=True)
    except (ValueError, RuntimeError, TypeError):
        return None
    if arr.shape[0] != h or arr.shape[1] != w:
        return None
    if img.mode == "L":
        out = Image.fromarray(arr[:, :, 0], "L")
    else:
        out = Image.frombytes("RGB", (w, h), arr, "raw", "RGBX")
    out.info = dict(img.info)  # EXIF etc., as on the Pillow image (encode_image drops it)
    return out
