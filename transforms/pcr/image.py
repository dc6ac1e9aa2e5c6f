"""One input image -> a progressive JPEG, lossless whenever the input is a JPEG.

* JPEG input: piped through ``jpegtran -copy none -optimize -progressive`` (libjpeg-turbo),
  which rewrites the entropy coding only: decoded pixels stay identical.  If the source
  carries an EXIF orientation other than 1, the same jpegtran call applies it losslessly
  (``-rotate``/``-flip``/``-transpose``/``-transverse`` with ``-perfect``) before
  ``-copy none`` strips the EXIF block; when the image size makes that impossible
  (partial MCU blocks at the edges), the image is decoded, turned upright and encoded once
  at ``quality`` (recorded as ``lossless=False``).
* Any other image Pillow can open (PNG, WebP, TIFF, BMP, GIF...): turned upright by its
  EXIF orientation, converted to L (gray modes; 16-bit gray keeps its high byte), CMYK
  (kept) or RGB (everything else; an alpha channel is dropped), encoded once as baseline
  JPEG at ``quality`` (default 90, 4:2:0), then sent through the same jpegtran call.

A custom jpegtran scan script (``scans``, a ``-scans`` file; ``transforms/pcr/scan_script.py``)
replaces jpegtran's standard progression for 3-component images.  A script names component
indexes, so it fits one component count only: grayscale, CMYK and other images keep the
standard script (jpegtran refuses a colour script for them: "Invalid scan script at entry 1").

Bytes go through jpegtran's stdin/stdout: inputs are never modified nor written to disk.
Failures raise :class:`ImageRejected` with a reason whose prefix is a stable kind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil
import subprocess
import warnings
from typing import List, Optional

import numpy as np
from PIL import Image, ImageOps, JpegImagePlugin

DEFAULT_QUALITY = 90
JPEGTRAN_ARGS = ["-copy", "none", "-optimize", "-progressive"]
# EXIF orientation -> the jpegtran transform that makes the image upright (EXIF 2.3, 4.6.4)
_ORIENT = {
    2: ["-flip", "horizontal"],
    3: ["-rotate", "180"],
    4: ["-flip", "vertical"],
    5: ["-transpose"],
    6: ["-rotate", "90"],
    7: ["-transverse"],
    8: ["-rotate", "270"],
}
_EXIF_ORIENTATION = 0x0112
_GRAY_MODES = {"1", "L", "LA", "La"}
SCRIPT_COMPONENTS = 3  # a custom scan script is used for images with this many components


class ImageRejected(ValueError):
    """The input cannot become a progressive JPEG; ``str(e)`` is the reason."""


@dataclasses.dataclass(frozen=True)
class Progressive:
    data: bytes  # the progressive JPEG
    source_format: str  # "JPEG", "PNG", ...
    orientation: int  # EXIF orientation found in the source (1 = none/upright)
    # the source's DCT coefficients, not re-encoded; an EXIF turn is done on the
    # coefficients (turning the decode back gives the source's pixels)
    lossless: bool


def jpegtran_path() -> Optional[str]:
    return shutil.which("jpegtran")


def jpegtran(data: bytes, extra: List[str] = (), timeout: float = 120.0) -> bytes:
    """Run jpegtran on bytes; warnings count as failure (they mean damaged input)."""
    exe = jpegtran_path()
    if exe is None:
        raise RuntimeError(
            "jpegtran not found: install libjpeg-turbo-progs (launch/setup.d/20-apt.sh)"
        )
    proc = subprocess.run(
        [exe, *JPEGTRAN_ARGS, *extra], input=data, capture_output=True, timeout=timeout
    )
    if proc.returncode != 0 or not proc.stdout:
        msg = (
            proc.stderr.decode("utf-8", "replace").strip().replace("\n", "; ")
            or f"exit {proc.returncode}"
        )
        raise ImageRejected(f"jpegtran rejected: {msg}")
    return proc.stdout


@contextlib.contextmanager
def _pillow_errors():
    """Pillow's failures as :class:`ImageRejected` with a stable reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except Image.UnidentifiedImageError:  # its message holds an object address: not stable
        raise ImageRejected("not an image: Pillow recognises no image format in it") from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as e:
        raise ImageRejected(f"image too large to decode: {e}") from None
    except Exception as e:
        raise ImageRejected(f"undecodable image: {e.__class__.__name__}: {e}") from None


def _jpeg_header(data: bytes) -> Image.Image:
    """A JPEG's header (size, EXIF), no pixels.  Built by the plugin itself, not
    ``Image.open``, whose pixel limit (``Image.MAX_IMAGE_PIXELS``, a guard against
    decompression bombs) is for decoding: jpegtran converts a JPEG of any size."""
    with _pillow_errors():
        return JpegImagePlugin.JpegImageFile(io.BytesIO(data))


def _decoded(data: bytes):
    """(the decoded image, its EXIF orientation), the orientation read before the pixels
    (loading a TIFF drops the tag from what ``getexif`` sees)."""
    with _pillow_errors():
        img = Image.open(io.BytesIO(data))
        orient = _orientation(img)
        img.load()
    return img, orient


def _orientation(img: Image.Image) -> int:
    try:
        value = int(img.getexif().get(_EXIF_ORIENTATION, 1))
    except Exception:
        return 1
    return value if value in range(1, 9) else 1


def _baseline(img: Image.Image, quality: int) -> bytes:
    img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I;16"):  # 16-bit gray: keep the high byte
        img = Image.fromarray((np.asarray(img, dtype=np.uint16) >> 8).astype(np.uint8))
    elif img.mode in ("I", "F"):  # 32-bit gray: values taken as 0..255
        img = Image.fromarray(np.clip(np.asarray(img), 0, 255).astype(np.uint8))
    elif img.mode in _GRAY_MODES:
        img = img.convert("L")
    elif img.mode != "CMYK":
        img = img.convert("RGB")
    out = io.BytesIO()
    img.save(out, "JPEG", quality=quality)
    return out.getvalue()


def is_jpeg(data: bytes) -> bool:
    return data[:3] == b"\xff\xd8\xff"


def _scans(scans: Optional[str], jpeg: Image.Image) -> List[str]:
    """jpegtran's ``-scans`` arguments for this JPEG (its header), or none."""
    return ["-scans", scans] if scans and jpeg.layers == SCRIPT_COMPONENTS else []


def to_progressive(
    data: bytes, quality: int = DEFAULT_QUALITY, scans: Optional[str] = None
) -> Progressive:
    """``scans``: a local jpegtran scan-script file, used for 3-component images."""
    if not data:
        raise ImageRejected("not an image: empty")
    if is_jpeg(data):
        # header only: jpegtran decodes every coefficient, so it is the integrity check
        head = _jpeg_header(data)
        orient = _orientation(head)
        if orient == 1:
            return Progressive(jpegtran(data, _scans(scans, head)), "JPEG", 1, True)
        try:
            return Progressive(
                jpegtran(data, ["-perfect", *_ORIENT[orient], *_scans(scans, head)]),
                "JPEG",
                orient,
                True,
            )
        except ImageRejected:
            # -perfect refuses partial edge blocks, and damaged data fails it too: only an
            # image jpegtran reads cleanly without the transform may take the lossy way
            # (Pillow would decode damaged data without a word)
            jpegtran(data)
            base = _baseline(_decoded(data)[0], quality)
            return Progressive(
                jpegtran(base, _scans(scans, _jpeg_header(base))), "JPEG", orient, False
            )
    img, orient = _decoded(data)
    base = _baseline(img, quality)
    return Progressive(
        jpegtran(base, _scans(scans, _jpeg_header(base))), img.format or "unknown", orient, False
    )
