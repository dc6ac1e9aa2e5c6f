"""The ``numpy`` image codec: libjpeg-turbo and OpenCV on numpy arrays (the default).

* **Decode** (JPEG): libjpeg-turbo's TurboJPEG API through ``simplejpeg``, straight into
  an ``H x W x C`` array, at the DCT-domain scale Pillow's ``draft`` would pick (1/2, 1/4
  or 1/8, never below the size asked for).  The pixels are Pillow's: the same accurate
  integer IDCT and smooth chroma upsampling (``tests/unit/test_jpeg_codec.py``), so ``Decode``
  gives the same arrays with either codec.
* **Resize** (the default method, ``bilinear``): OpenCV ``INTER_AREA`` when shrinking --
  each output pixel the area-weighted mean of the input pixels it covers, the antialiased
  filter for downscaling -- and ``INTER_LINEAR_EXACT`` (bilinear, OpenCV's bit-exact
  fixed-point variant) when enlarging, where no antialiasing is needed.  A resize that
  shrinks one side and enlarges the other runs the two in turn, shrinking first.
* **Encode** (JPEG): libjpeg-turbo through ``simplejpeg``, with Pillow's settings: accurate
  integer DCT, 4:2:0 chroma subsampling for colour, standard Huffman tables, baseline.

Everything else returns None and the caller (:mod:`transforms.ops.images`) uses Pillow:
PNG and BMP, CMYK / YCCK and other JPEG colour spaces, an EXIF orientation other than 1
(Pillow rotates), ``channels=1`` of a colour JPEG (Pillow's luma formula), images under
16 pixels a side, any JPEG TurboJPEG warns about (a truncated file keeps Pillow's error),
resize methods other than the default, and arrays other than uint8 / float32 with 1, 3
or 4 channels.

OpenCV runs on one thread (``cv2.setNumThreads(1)``): tar2tf already converts on a worker
per core, so OpenCV's own thread pool would only oversubscribe the cores, and a pool of
threads must not exist in a process that tar2tf's pool may fork.  The output of a resize
does not depend on the thread count either way (rows are computed independently), so the
bytes are the same on every driver, runner and worker count; with the same library
versions on the same kind of CPU they are the same everywhere.

The libraries are imported at first use: a worker passing records through never pays for
them.
"""

from __future__ import annotations

import struct
from typing import Optional, Tuple

from transforms.lazynp import np

_MIN_SIDE = 16  # see transforms.ops.jpeg_codec: tiny images keep Pillow's scaled sizes
_EXIF_ORIENTATION = 0x0112

_libs = {}


def _missing(package: str) -> ImportError:
    """The one-line reason every image op gives when a library of this codec is missing."""
    return ImportError(
        f"the numpy image codec needs {package} (pip install {package}); "
        "or set TAR2TF_IMAGE_CODEC=pillow"
    )


def _sj():
    mod = _libs.get("simplejpeg")
    if mod is None:
        try:
            import simplejpeg as mod
        except ImportError:
            raise _missing("simplejpeg") from None
        _libs["simplejpeg"] = mod
    return mod


def _cv2():
    mod = _libs.get("cv2")
    if mod is None:
        try:
            import cv2 as mod
        except ImportError:
            raise _missing("opencv-python-headless") from None
        # one thread: the worker pool already uses every core (module docstring)
        mod.setNumThreads(1)
        _libs["cv2"] = mod
    return mod


def check() -> None:
    """Import both libraries now; ImportError names what is missing."""
    _sj()
    _cv2()


# -- decode ---------------------------------------------------------------------------------


def exif_orientation(data: bytes) -> Optional[int]:
    """EXIF orientation (tag 274) from a JPEG's first ``Exif`` APP1 segment; 1 when there
    is none; None when the markers or the EXIF block cannot be read (the caller then
    leaves the image to Pillow, which decides)."""
    n = len(data)
    i = 2
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD9, 0xDA):  # EOI, SOS: no more headers
            return 1
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # no length field
            i += 2
            continue
        length = (data[i + 2] << 8) | data[i + 3]
        if length < 2 or i + 2 + length > n:
            return None
        if marker == 0xE1 and data[i + 4 : i + 10] == b"Exif\x00\x00":
            return _tiff_orientation(bytes(data[i + 10 : i + 2 + length]))
        i += 2 + length
    return None


def _tiff_orientation(tiff: bytes) -> Optional[int]:
    try:
        order = {b"II": "<", b"MM": ">"}[tiff[:2]]
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (count,) = struct.unpack_from(order + "H", tiff, ifd)
        for k in range(count):
            tag, typ, cnt = struct.unpack_from(order + "HHI", tiff, ifd + 2 + 12 * k)
            if tag == _EXIF_ORIENTATION:
                if typ != 3 or cnt < 1:  # SHORT; anything else: Pillow decides
                    return None
                return struct.unpack_from(order + "H", tiff, ifd + 10 + 12 * k)[0]
    except (KeyError, struct.error):
        return None
    return 1


def dct_scale(w: int, h: int, draft_size: Optional[Tuple[int, int]]) -> int:
    """The reduction (1, 2, 4 or 8) Pillow's ``draft(None, draft_size)`` picks for a w x h
    JPEG: the largest that keeps both sides at least ``draft_size``."""
    if draft_size is None:
        return 1
    dw, dh = max(1, int(draft_size[0])), max(1, int(draft_size[1]))
    scale = min(w // dw, h // dh)
    for s in (8, 4, 2):
        if scale >= s:
            return s
    return 1


# (header colour space, channels asked for) -> TurboJPEG pixel format
_SPACES = {
    ("YCbCr", 3): "RGB",
    ("YCbCr", None): "RGB",
    ("YCbCr", 4): "RGBA",  # alpha 255, as Pillow's convert("RGBA")
    ("Gray", 1): "GRAY",
    ("Gray", None): "GRAY",
    ("Gray", 3): "RGB",  # grey replicated, as Pillow's convert("RGB")
    ("Gray", 4): "RGBA",
}


def header(data: bytes) -> Optional[Tuple[int, int, str]]:
    """(width, height, colour space) of a JPEG, or None when TurboJPEG cannot read it."""
    if not data.startswith(b"\xff\xd8"):
        return None
    try:
        h, w, space, _sub = _sj().decode_jpeg_header(data)
    except (ValueError, RuntimeError, TypeError):
        return None
    return w, h, space


def decode_jpeg(
    data: bytes,
    w: int,
    h: int,
    space: str,
    channels: Optional[int],
    exif: bool,
    draft_size: Optional[Tuple[int, int]],
):
    """``H x W x C`` uint8 array of a JPEG whose :func:`header` is (w, h, space), or None
    when Pillow should decode it (module docstring)."""
    fmt = _SPACES.get((space, channels))
    if fmt is None or min(w, h) < _MIN_SIDE:
        return None
    if exif and exif_orientation(data) != 1:
        return None
    s = dct_scale(w, h, draft_size)
    ew, eh = -(-w // s), -(-h // s)  # Pillow's reduced size: rounded up
    try:
        if s > 1:
            arr = _sj().decode_jpeg(data, colorspace=fmt, min_width=ew, min_height=eh, strict=True)
        else:
            arr = _sj().decode_jpeg(data, colorspace=fmt, strict=True)
    except (ValueError, RuntimeError, TypeError):  # damaged or odd: Pillow's error or pixels
        return None
    if arr.shape[0] != eh or arr.shape[1] != ew:
        return None
    return arr


# -- resize ---------------------------------------------------------------------------------


def resize(arr, w: int, h: int):
    """``arr`` (H x W x C, uint8 or float32, C in 1, 3, 4) resized to w x h, or None for
    arrays OpenCV is not used for."""
    if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4) or arr.dtype not in (np.uint8, np.float32):
        return None
    cv2 = _cv2()
    src_h, src_w = arr.shape[:2]
    out = np.ascontiguousarray(arr)
    if w < src_w and h > src_h:
        out = _area(cv2, out, w, src_h)
    elif h < src_h and w > src_w:
        out = _area(cv2, out, src_w, h)
    cur_h, cur_w = out.shape[:2]
    if (cur_w, cur_h) != (w, h):
        if w <= cur_w and h <= cur_h:
            out = _area(cv2, out, w, h)
        else:
            # INTER_LINEAR_EXACT is bit-exact fixed point for uint8; float32 has no such variant
            up = cv2.INTER_LINEAR_EXACT if out.dtype == np.uint8 else cv2.INTER_LINEAR
            out = cv2.resize(out, (w, h), interpolation=up)
    if out.ndim == 2:  # OpenCV drops a single channel's axis
        out = out[:, :, None]
    return out


def _area(cv2, arr, w: int, h: int):
    """``INTER_AREA`` shrink.  uint8 goes through float32: OpenCV's uint8 path averages in
    float too and rounds to nearest even as ``np.rint`` does (the same pixels on the
    benchmark's images), and its float32 path is about a quarter faster (docs/benchmarks.md)."""
    if arr.dtype != np.uint8:
        return cv2.resize(arr, (w, h), interpolation=cv2.INTER_AREA)
    out = cv2.resize(arr.astype(np.float32), (w, h), interpolation=cv2.INTER_AREA)
    np.rint(out, out=out)  # averages of 0..255 stay within 0..255
    return out.astype(np.uint8)


# -- encode ---------------------------------------------------------------------------------


def encode_jpeg(arr, quality: int) -> Optional[bytes]:
    """uint8 ``H x W`` / ``H x W x 1`` (grey) or ``H x W x 3`` (RGB) -> JPEG bytes, or None
    for other shapes and qualities outside 1..100 (Pillow then encodes or says why not)."""
    if arr.dtype != np.uint8:
        return None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 3):
        return None
    q = int(quality)
    if not 1 <= q <= 100:  # Pillow's own handling of out-of-range qualities
        return None
    if arr.shape[2] == 1:
        space, sub = "GRAY", "Gray"
    else:
        space, sub = "RGB", "420"  # Pillow's (libjpeg's) default subsampling
    return _sj().encode_jpeg(
        np.ascontiguousarray(arr), quality=q, colorspace=space, colorsubsampling=sub, fastdct=False
    )
