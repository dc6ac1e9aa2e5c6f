"""Image arrays with Pillow and numpy: decode, dtype conversion, resize, rotate, encode.

These are the plain functions behind the ops in :mod:`transforms.ops`.  Arrays are always
``H x W x C`` (channels last, 3-D), like ``tf.image``.

Channel rules of :func:`decode` (``channels`` = 3 by default):

* ``channels=3``: grayscale is replicated to RGB; RGBA/LA drop alpha (no compositing,
  as ``tf.io.decode_png(channels=3)``); palette images are expanded through their
  palette; CMYK (JPEG, including Adobe-inverted CMYK, which Pillow un-inverts) is
  converted with Pillow's CMYK->RGB formula; 16-bit grayscale is scaled to 8 bits.
* ``channels=1``: luma ``L = 0.299 R + 0.587 G + 0.114 B`` (Pillow's ``convert("L")``).
* ``channels=4``: RGBA; images without alpha get alpha 255.
* ``channels=None``: keep what the file has: L -> 1, LA -> 2, RGB/CMYK/YCbCr -> 3,
  RGBA -> 4, palette -> 3 (4 if the palette has transparency).  16-bit gray+alpha PNGs
  are LA (Pillow opens them as RGBA).  A 32-bit BMP is RGBA with its fourth byte as
  alpha, as ``tf.io.decode_bmp`` reads it (Pillow drops that byte unless the header has
  an alpha mask), even when the writer meant it as padding (then alpha is often 0).

EXIF orientation (tag 274) is applied, so the array is upright as a viewer shows it.

PNG chunk CRCs are checked (:func:`_check_png`): Pillow's decoder skips the CRC of IDAT
chunks, so a flipped bit in the image data decodes to altered pixels where
``tf.io.decode_png`` (libpng) fails with "Invalid PNG data".

Two codecs do the work (a job's ``image_codec``, set in each process that runs its ops:
:func:`set_codec`; :mod:`transforms.ops.codec_choice`):

* ``numpy`` (the default): JPEG decode and encode with libjpeg-turbo (``simplejpeg``) on
  numpy arrays, the default resize with OpenCV (``INTER_AREA`` shrinking,
  ``INTER_LINEAR_EXACT`` enlarging); Pillow for everything else
  (:mod:`transforms.ops.numpy_codec`).  Decoded arrays are Pillow's pixels; resized
  images and encoded JPEGs differ from the ``pillow`` codec's bytes.
* ``pillow``: Pillow for every step, and a chain of image ops (decode -> resize ->
  encode) stays in Pillow images with no array copies: the bytes tar2tf wrote before the
  ``numpy`` codec existed.
"""

from __future__ import annotations

import io
import struct
import warnings
from typing import Optional, Sequence, Tuple

from PIL import Image, ImageOps, UnidentifiedImageError

from transforms.lazynp import is_array, np
from transforms.ops import image_limits, jpeg_codec, numpy_codec
from transforms.ops.codec_choice import checked, default_codec

# the codec of this process's image ops: a job's workers set their job's
# (``set_codec``); ops used outside a job (the streamed API) take the default
CODEC = default_codec()

FORMATS = ("BMP", "JPEG", "PNG")
_FORMAT_ALIASES = {"JPG": "JPEG", "MPO": "JPEG"}  # MPO: camera JPEGs with a multi-picture index
_SWAPS_AXES = (5, 6, 7, 8)  # EXIF orientations that transpose width and height
_METHODS = {
    "nearest": Image.NEAREST,
    "bilinear": Image.BILINEAR,
    "bicubic": Image.BICUBIC,
    "lanczos": Image.LANCZOS,
    "area": Image.BOX,
    "box": Image.BOX,
}


class ImageError(ValueError):
    """Bytes that are not an image this op accepts."""


def codec() -> str:
    """The image codec in use (``numpy`` or ``pillow``); a bad default is an error of
    every image op (one clear reject reason, not a silent choice)."""
    return checked(CODEC)


def set_codec(name: str) -> None:
    """The codec of this process's image ops from now on: a job's (``ConvertConfig.stages``
    sets it in every process that runs the job's stages)."""
    global CODEC
    CODEC = checked(name)


def pillow_chain() -> bool:
    """Whether chained image ops should pass Pillow images (the ``pillow`` codec)."""
    return codec() == "pillow"


def norm_format(fmt: str) -> str:
    f = fmt.upper()
    return _FORMAT_ALIASES.get(f, f)


def _open(data: bytes, formats: Sequence[str]) -> Image.Image:
    if is_array(data):
        raise ImageError("value is already an array (decoded twice?)")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageError(f"value is {type(data).__name__}, not encoded image bytes")
    try:
        with warnings.catch_warnings():  # the size is checked below, against the job's own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(bytes(data)))
    except Image.DecompressionBombError as e:  # over Pillow's hard limit (2x its warning size)
        raise ImageError(f"image too large: {e}") from None
    except UnidentifiedImageError:
        head = bytes(data[:8])
        raise ImageError(f"not an image: bytes start with {head!r}") from None
    except (OSError, SyntaxError, ValueError) as e:  # header present but damaged
        raise ImageError(f"corrupt {_sniff(bytes(data[:8]))} image: {e}") from None
    w, h = img.size
    if w * h > image_limits.max_pixels:
        raise ImageError(
            f"image too large: {w}x{h} = {w * h} pixels > max-image-pixels "
            f"{image_limits.max_pixels}"
        )
    fmt = norm_format(img.format or "?")
    allowed = [norm_format(f) for f in formats]
    if fmt not in allowed:
        raise ImageError(f"unsupported image format {fmt}: expected {'/'.join(allowed)}")
    return img


def _sniff(head: bytes) -> str:
    for magic, name in ((b"\xff\xd8", "JPEG"), (b"\x89PNG", "PNG"), (b"BM", "BMP")):
        if head.startswith(magic):
            return name
    return "?"


def _orientation(img: Image.Image) -> int:
    try:
        return int(img.getexif().get(274, 1))
    except Exception:
        return 1


def decode(
    data: bytes,
    channels: Optional[int] = 3,
    formats: Sequence[str] = FORMATS,
    exif: bool = True,
    draft_size: Optional[Tuple[int, int]] = None,
) -> np.ndarray:
    """Encoded BMP/JPEG/PNG bytes -> uint8 ``H x W x C`` array (see the module docstring).

    ``draft_size`` = (w, h): for JPEG, let libjpeg decode at 1/2, 1/4 or 1/8 scale in the
    DCT domain, never below ``draft_size`` (Pillow's ``draft``); other formats ignore it.
    """
    if codec() == "numpy" and isinstance(data, (bytes, bytearray, memoryview)):
        arr = _decode_numpy(bytes(data), channels, formats, exif, draft_size)
        if arr is not None:
            return arr
    return to_array(decode_image(data, channels, formats, exif, draft_size))


def _decode_numpy(data: bytes, channels, formats, exif, draft_size):
    """The ``numpy`` codec's JPEG decode, or None where Pillow decodes (it then also gives
    the errors: format, damage)."""
    if "JPEG" not in [norm_format(f) for f in formats]:
        return None
    head = numpy_codec.header(data)
    if head is None:
        return None
    w, h, space = head
    if w * h > image_limits.max_pixels:
        raise ImageError(
            f"image too large: {w}x{h} = {w * h} pixels > max-image-pixels "
            f"{image_limits.max_pixels}"
        )
    return numpy_codec.decode_jpeg(data, w, h, space, channels, exif, draft_size)


def decode_image(
    data: bytes,
    channels: Optional[int] = 3,
    formats: Sequence[str] = FORMATS,
    exif: bool = True,
    draft_size: Optional[Tuple[int, int]] = None,
) -> Image.Image:
    """:func:`decode`, stopping at the Pillow image (mode L, LA, RGB or RGBA), so that a
    chain of image ops (decode -> resize -> encode) stays in Pillow with no array copies."""
    img = _open(data, formats)
    if img.format == "PNG":
        _check_png(data)
    orient = _orientation(img) if exif else 1
    if draft_size is not None and norm_format(img.format or "") == "JPEG":
        w, h = draft_size
        if orient in _SWAPS_AXES:
            w, h = h, w
        img.draft(None, (max(1, int(w)), max(1, int(h))))
    fmt = norm_format(img.format or "?")
    fast = jpeg_codec.decode_like_pillow(img, data)  # None: not a JPEG TurboJPEG decodes alike
    if fast is not None:
        img = fast
    try:
        img = _bmp_with_alpha(img, data)
        img.load()
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"corrupt {fmt} image: {e}") from None
    if img.mode == "RGBA" and fmt == "PNG" and _png_color_type(data) == _PNG_GRAY_ALPHA:
        # Pillow has no 16-bit LA mode and opens 16-bit gray+alpha as RGBA (gray in R, G
        # and B, high bytes); libpng / tf.io.decode_png give 2 channels
        img = Image.merge("LA", (img.getchannel("R"), img.getchannel("A")))
    if orient != 1:
        img = ImageOps.exif_transpose(img)
    return _to_channels(img, channels)


_PNG_GRAY_ALPHA = 4  # IHDR colour type


def _png_color_type(data: bytes) -> int:
    """The IHDR colour type (byte 25: signature 8, length 4, "IHDR" 4, width, height, depth)."""
    return data[25] if len(data) > 25 and bytes(data[12:16]) == b"IHDR" else -1


def _bmp_with_alpha(img: Image.Image, data: bytes) -> Image.Image:
    """A 32-bit BMP with its fourth byte as alpha, as ``tf.io.decode_bmp`` reads it.

    Pillow takes that byte as padding ("BGRX", mode RGB) unless the header has an alpha
    bit mask -- so not for the plain 40-byte header Pillow itself writes for RGBA -- and
    Decode would drop the alpha TF keeps.  TF reads every 32-bit BMP as BGRA, so the same
    pixel bytes are decoded again with Pillow's raw decoder as BGRA (same offset, row
    stride and row order)."""
    if img.format != "BMP" or img.mode != "RGB" or len(img.tile) != 1:
        return img
    codec, _extents, offset, args = img.tile[0]
    if codec != "raw" or not isinstance(args, tuple) or len(args) != 3 or args[0] != "BGRX":
        return img
    _rawmode, stride, ystep = args
    return Image.frombuffer("RGBA", img.size, bytes(data[offset:]), "raw", "BGRA", stride, ystep)


def _check_png(data: bytes) -> None:
    """Every chunk's CRC32 (over its type and data) must match, as libpng requires.

    Pillow does it in ``Image.verify()`` (zlib.crc32 per chunk, up to IEND), which needs an
    image of its own: one more ``Image.open`` of the bytes, small next to the decode."""
    try:
        Image.open(io.BytesIO(bytes(data))).verify()
    except (
        OSError,
        SyntaxError,
        ValueError,
        struct.error,
    ) as e:  # "bad header checksum in b'IDAT'"
        raise ImageError(f"corrupt PNG image: {e}") from None


def to_array(img: Image.Image) -> np.ndarray:
    """A Pillow image -> ``H x W x C`` uint8 array (grayscale gets its channel axis)."""
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return np.ascontiguousarray(arr)


def _to_channels(img: Image.Image, channels: Optional[int]) -> Image.Image:
    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(img).astype(np.uint32)
        img = Image.fromarray((arr >> 8).clip(0, 255).astype(np.uint8), "L")
        mode = "L"
    elif mode == "1":
        img, mode = img.convert("L"), "L"
    elif mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
        mode = img.mode
    elif mode == "PA":
        img, mode = img.convert("RGBA"), "RGBA"
    elif mode in ("CMYK", "YCbCr", "LAB", "HSV"):
        img, mode = img.convert("RGB"), "RGB"
    if channels is None:
        return img if mode in ("L", "LA", "RGB", "RGBA") else img.convert("RGB")
    target = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}.get(int(channels))
    if target is None:
        raise ValueError(f"channels must be 1, 2, 3, 4 or None, not {channels!r}")
    if mode == target:
        return img
    if target == "RGB" and mode in ("RGBA", "LA"):
        img = img.convert("RGBA") if mode == "LA" else img
        return Image.fromarray(np.asarray(img)[:, :, :3], "RGB")  # drop alpha, no compositing
    return img.convert(target)


# -- dtypes -----------------------------------------------------------------------------


def as_numpy_dtype(dtype) -> np.dtype:
    """numpy dtype from a numpy dtype, a name (``"float32"``) or a ``tf.DType``."""
    npd = getattr(dtype, "as_numpy_dtype", None)
    if npd is not None:
        return np.dtype(npd)
    if getattr(dtype, "name", None) and not isinstance(dtype, (str, np.dtype, type)):
        return np.dtype(dtype.name)
    return np.dtype(dtype)


def convert_dtype(arr: np.ndarray, dtype) -> np.ndarray:
    """Change dtype scaling as ``tf.image.convert_image_dtype`` (saturating).

    Integer images span ``[0, max]`` of their type, float images ``[0, 1]``: uint8 255
    becomes 1.0; 1.0 becomes uint8 255; uint8 -> uint16 multiplies by 256 (as TF).
    """
    arr = np.asarray(arr)
    dst = as_numpy_dtype(dtype)
    src = arr.dtype
    if src == dst:
        return arr
    if src.kind == "b" or dst.kind == "b":
        return arr.astype(dst)
    src_int, dst_int = src.kind in "iu", dst.kind in "iu"
    if src_int and dst_int:
        smax, dmax = int(np.iinfo(src).max), int(np.iinfo(dst).max)
        if smax > dmax:
            return (arr.astype(np.int64) // ((smax + 1) // (dmax + 1))).astype(dst)
        return (arr.astype(np.int64) * ((dmax + 1) // (smax + 1))).astype(dst)
    if (
        src_int
    ):  # int -> float: cast, then multiply by 1/max in the target type (TF's exact formula)
        return arr.astype(dst) * np.asarray(1.0 / np.iinfo(src).max, dtype=dst)
    if dst_int:
        return _float_to_int(arr, dst)
    return arr.astype(dst)


def _float_to_int(arr: np.ndarray, dst: np.dtype) -> np.ndarray:
    """float -> int exactly as ``tf.image.convert_image_dtype(saturate=True)``.

    TF multiplies by ``max + 0.5`` *in the image's float type* (the Python scale becomes a
    tensor of that type), clips to the largest/smallest value of that type that fits the
    target (``saturate_cast``: float32 -> int32 saturates at 2147483520, not 2**31 - 1,
    which float32 rounds up to 2**31) and truncates.  Scaling in float64 instead differs
    by one for some values (float32 0.62021345 -> uint16: 40645 vs TF's 40646).

    One exception: where ``max + 0.5`` overflows float16 (uint16, int32, uint32, int64,
    uint64), TF's scale is inf and its output degenerate (float16 0.5 -> uint16 65504,
    0 -> int32 -2**31 since 0 * inf is NaN); the float16 image is widened to float32
    first, which is TF's result for ``tf.cast(image, tf.float32)``.
    """
    info = np.iinfo(dst)
    src = arr.dtype
    with np.errstate(over="ignore"):
        scale = src.type(info.max + 0.5)
    if not np.isfinite(scale):
        return _float_to_int(arr.astype(np.float32), dst)
    lo, hi = _saturate_limits(src, dst)
    # NaN (no image value) casts as numpy casts it: TF's own result varies with the
    # array's length (its scalar and vectorised casts differ), so there is none to match
    with np.errstate(over="ignore", invalid="ignore"):
        return np.clip(arr * scale, lo, hi).astype(dst)


def _saturate_limits(src: np.dtype, dst: np.dtype):
    """The clip bounds of TF's ``saturate_cast`` from float ``src`` to int ``dst``: the
    target's min/max as ``src`` values, moved one step toward zero when ``src`` rounds
    them outside the target range (compared in the promoted type, as TF does)."""
    fi, ii = np.finfo(src), np.iinfo(dst)
    promoted = np.promote_types(src, dst)
    with np.errstate(over="ignore"):
        lo = src.type(max(float(fi.min), ii.min))
        hi = src.type(min(float(fi.max), float(ii.max)))
    if np.array(lo, promoted) < np.array(ii.min, promoted):
        lo = np.nextafter(lo, src.type(0))
    if np.array(hi, promoted) > np.array(ii.max, promoted):
        hi = np.nextafter(hi, src.type(0))
    return lo, hi


# -- geometry ---------------------------------------------------------------------------


def _per_channel(arr: np.ndarray, fn) -> np.ndarray:
    """Apply a Pillow transform to each channel in mode ``F`` (floats, any int type)."""
    chans = [
        np.asarray(fn(Image.fromarray(arr[:, :, c].astype(np.float32), "F")))
        for c in range(arr.shape[2])
    ]
    out = np.stack(chans, axis=-1)
    if arr.dtype.kind in "iu":
        info = np.iinfo(arr.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return out.astype(arr.dtype)


def _apply(arr: np.ndarray, fn) -> np.ndarray:
    arr = np.asarray(arr)
    squeeze = arr.ndim == 2
    if squeeze:
        arr = arr[:, :, None]
    if arr.ndim != 3:
        raise ValueError(f"expected an H x W x C image array, got shape {arr.shape}")
    c = arr.shape[2]
    if arr.dtype == np.uint8 and c in (1, 3, 4):
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[c]
        out = np.asarray(fn(Image.fromarray(arr[:, :, 0] if c == 1 else arr, mode)))
        out = out[:, :, None] if out.ndim == 2 else out
    else:
        out = _per_channel(arr, fn)
    return out[:, :, 0] if squeeze else out


def resample_method(method: str):
    try:
        return _METHODS[method.lower()]
    except KeyError:
        raise ValueError(
            f"unknown resize method {method!r}: use one of {sorted(_METHODS)}"
        ) from None


def resize(arr: np.ndarray, size: Tuple[int, int], method: str = "bilinear") -> np.ndarray:
    """Resize to ``size`` = (width, height); antialiased when shrinking.

    ``bilinear`` (the default) with the ``numpy`` codec: OpenCV ``INTER_AREA`` shrinking,
    ``INTER_LINEAR_EXACT`` enlarging (uint8 / float32 arrays of 1, 3 or 4 channels);
    otherwise Pillow's filter of that name."""
    w, h = int(size[0]), int(size[1])
    if w <= 0 or h <= 0:
        raise ValueError(f"resize target must be positive, got {size!r}")
    if arr.shape[1] == w and arr.shape[0] == h:
        return arr
    m = resample_method(method)
    if method.lower() == "bilinear" and codec() == "numpy":
        a = np.asarray(arr)
        out = numpy_codec.resize(a[:, :, None] if a.ndim == 2 else a, w, h)
        if out is not None:
            return out[:, :, 0] if a.ndim == 2 else out
    return _apply(arr, lambda im: im.resize((w, h), m))


def resize_image(img: Image.Image, size: Tuple[int, int], method: str = "bilinear") -> Image.Image:
    """:func:`resize` for a Pillow image in mode L, RGB or RGBA (the same pixels)."""
    w, h = int(size[0]), int(size[1])
    if w <= 0 or h <= 0:
        raise ValueError(f"resize target must be positive, got {size!r}")
    if img.size == (w, h):
        return img
    return img.resize((w, h), resample_method(method))


# modes whose pixels resize_image / encode_image treat exactly as the array functions do
PILLOW_NATIVE = ("L", "RGB", "RGBA")


def rotate(arr: np.ndarray, angle: float, method: str = "bilinear", fill: float = 0) -> np.ndarray:
    """Rotate clockwise by ``angle`` degrees about the centre; same size, corners ``fill``."""
    m = resample_method(method)
    if m not in (Image.NEAREST, Image.BILINEAR, Image.BICUBIC):
        m = Image.BILINEAR
    return _apply(
        arr,
        lambda im: im.rotate(
            -float(angle), resample=m, expand=False, fillcolor=_fill_for(im, fill)
        ),
    )


def _fill_for(im: Image.Image, fill: float):
    if im.mode in ("RGB", "RGBA"):
        return (int(fill),) * len(im.mode)
    return float(fill) if im.mode == "F" else int(fill)


# -- encode -----------------------------------------------------------------------------


def encode(arr: np.ndarray, fmt: str = "jpeg", quality: int = 95) -> bytes:
    """uint8 (or float in [0, 1]) ``H x W x C`` array -> JPEG or PNG bytes (deterministic)."""
    fmt = norm_format(fmt)
    arr = np.asarray(arr)
    if arr.dtype != np.uint8:
        arr = convert_dtype(arr, np.uint8)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 3 and arr.shape[2] not in (2, 3, 4) or arr.ndim not in (2, 3):
        raise ValueError(f"cannot encode an array of shape {arr.shape} as an image")
    if fmt == "JPEG" and codec() == "numpy":
        out = numpy_codec.encode_jpeg(arr, quality)
        if out is not None:
            return out
    return encode_image(Image.fromarray(arr), fmt, quality)


def encode_image(img: Image.Image, fmt: str = "jpeg", quality: int = 95) -> bytes:
    """:func:`encode` for a Pillow image (metadata such as EXIF or ICC is not carried over)."""
    fmt = norm_format(fmt)
    img.info = {}
    buf = io.BytesIO()
    if fmt == "JPEG":
        if img.mode not in ("L", "RGB"):
            raise ValueError(f"JPEG cannot store {img.mode} (alpha channel): use png")
        img.save(buf, "JPEG", quality=int(quality))
    elif fmt == "PNG":
        img.save(buf, "PNG", compress_level=6)
    else:
        raise ValueError(f"Encode supports jpeg and png, not {fmt.lower()}")
    return buf.getvalue()


# -- what TFDS's Image feature decodes ------------------------------------------------------

#: bits per pixel tf.io.decode_bmp reads (it refuses 1, 4 and 16-bit BMPs)
_TF_BMP_BITS = (8, 24, 32)


def check_tfds_image(data, channels: int) -> None:
    """Raise :class:`ImageError` unless ``tf.image.decode_image(data, channels)``, what a
    TFDS ``Image(shape=(None, None, channels))`` feature runs on every record it reads,
    gives an ``H x W x channels`` image.  One such record makes a whole split fail in
    ``as_dataset``, so ``--tfds-image`` rejects it at conversion instead.

    TF decodes JPEG, PNG and BMP to three axes; GIF and WebP to four (frames first),
    which the feature's shape refuses; TIFF not at all.  Besides: JPEG to 1 or 3
    channels only (and CMYK JPEG to 3), BMP to 3 or 4, of 8, 24 or 32 bits.  The
    header is read first (format, the ``--max-image-pixels`` bound), then the pixels
    are decoded with the job's codec -- at 1/8 scale for a JPEG: its entropy-coded data
    is read whole all the same -- so a truncated or damaged image is found too."""
    try:
        img = _open(data, FORMATS)
    except ImageError as e:
        if not str(e).startswith("unsupported image format"):
            raise
        raise ImageError(
            f"{e}: TFDS's Image feature decodes JPEG, PNG and BMP to one image (GIF and WebP "
            "to a stack of frames)"
        ) from None
    fmt = norm_format(img.format or "?")
    why = None
    if fmt == "JPEG" and channels == 4:
        why = "TFDS decodes a JPEG to 1 or 3 channels, not 4"
    elif fmt == "JPEG" and channels == 1 and img.mode == "CMYK":
        why = "TFDS decodes a CMYK JPEG to 3 channels only, not 1"
    elif fmt == "BMP" and channels == 1:
        why = "TFDS decodes a BMP to 3 or 4 channels, not 1"
    elif fmt == "BMP":
        bits = struct.unpack("<H", bytes(data[28:30]))[0] if len(data) >= 30 else 0
        if bits not in _TF_BMP_BITS:
            why = f"TFDS decodes BMPs of 8, 24 or 32 bits per pixel, not {bits}"
    if why is not None:
        raise ImageError(why)
    decode(data, None, FORMATS, False, (1, 1))
