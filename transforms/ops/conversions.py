"""Conversions (Decode, Convert, Resize, Rotate, Func, Encode): ops that rewrite one record entry.

Use them as *conversions* (sample stages that rewrite one record entry)::

    [Decode("jpg"), Resize("jpg", (32, 32))]

or nested, as *values* for selections::

    Resize(Convert(Decode("jpg"), tf.float32), (224, 224))

Every image op accepts encoded bytes too (it decodes them with ``Decode``'s defaults), so
``Resize("jpg", (32, 32))`` on raw JPEG bytes works and uses DCT-domain downscaling.
A failing op raises; the stage runner turns that into an ``op`` reject naming the op.
See ``docs/ops.md`` for channel rules, EXIF handling and determinism of random ops.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

from transforms.lazynp import is_array, np
from transforms.ops import images
from transforms.ops.base import Op, OpError, check_what, evaluate, map_ops
from transforms.record_types import KEY, Record


def _as_image(v: Any, size_hint=None) -> np.ndarray:
    if is_array(v):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return images.decode(v, draft_size=size_hint)
    raise OpError(f"expected an image (array or encoded bytes), got {type(v).__name__}")


def _pil_of(what: Any, record, size_hint=None):
    """``what`` as a Pillow image (mode L, RGB or RGBA) without a numpy round trip, or None
    when only the array path applies (an array input, another op, an unusual mode).
    Chains such as ``Encode(Resize(Decode(e)))`` then stay in Pillow: same pixels, same
    bytes, fewer copies made under the GIL.  Only with the ``pillow`` codec: the ``numpy``
    codec works on arrays."""
    if not images.pillow_chain():
        return None
    if isinstance(what, Op):
        img = what.pil(record, size_hint) if hasattr(what, "pil") else None
    else:
        v = evaluate(what, record)
        img = (
            images.decode_image(v, draft_size=size_hint)
            if isinstance(v, (bytes, bytearray, memoryview))
            else None
        )
    return img if img is not None and img.mode in images.PILLOW_NATIVE else None


class Decode(Op):
    """Encoded BMP/JPEG/PNG -> uint8 ``H x W x C``; anything else is an error (a reject).

    ``channels``: 3 (default), 1, 4 or None (keep); ``formats`` limits what is accepted,
    e.g. ``formats=("jpeg",)`` rejects PNGs; ``exif=False`` ignores EXIF orientation.
    An entry that is already an array is passed through unchanged.
    """

    def __init__(
        self,
        what,
        channels: Optional[int] = 3,
        formats: Sequence[str] = images.FORMATS,
        exif: bool = True,
    ):
        self.what, self.channels, self.exif = check_what("Decode", what), channels, exif
        self.formats = tuple(images.norm_format(f) for f in formats)
        if channels not in (None, 1, 2, 3, 4):
            raise ValueError(f"channels must be 1, 2, 3, 4 or None, not {channels!r}")

    def _args(self):
        extra = []
        if self.channels != 3:
            extra.append(f"channels={self.channels}")
        if self.formats != images.FORMATS:
            extra.append(f"formats={'/'.join(self.formats)}")
        if not self.exif:
            extra.append("exif=False")
        return (self.what, *[_Raw(e) for e in extra])

    def value(self, record, size_hint=None):
        v = evaluate(self.what, record)
        if is_array(v):
            return v
        return images.decode(v, self.channels, self.formats, self.exif, size_hint)

    def pil(self, record, size_hint=None):
        v = evaluate(self.what, record)
        if is_array(v):
            return None
        return images.decode_image(v, self.channels, self.formats, self.exif, size_hint)


class Convert(Op):
    """Change the dtype of an image array, scaling as ``tf.image.convert_image_dtype``.

    ``dtype``: numpy dtype, its name, or a ``tf.DType`` (``tf.float32``).
    """

    def __init__(self, what, dtype):
        self.what = check_what("Convert", what)
        self.dtype = images.as_numpy_dtype(dtype)

    def _args(self):
        return (self.what, _Raw(self.dtype.name))

    def value(self, record, size_hint=None):
        return images.convert_dtype(
            _as_image(evaluate(self.what, record, size_hint), size_hint), self.dtype
        )


class Resize(Op):
    """Resize an image to ``size`` = (width, height) (Pillow, antialiased when shrinking).

    When the input is a JPEG (raw bytes, or a ``Decode`` below, possibly through
    ``Convert``), it is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain if that still
    leaves at least ``draft_gap`` times the target size; then resized as usual.  The
    result stays close to a full decode + resize (tested) and is much faster for small
    targets.  ``draft_gap=None`` always decodes at full size.
    """

    def __init__(
        self,
        what,
        size: Tuple[int, int],
        method: str = "bilinear",
        draft_gap: Optional[float] = 2.0,
    ):
        self.what, self.method, self.draft_gap = check_what("Resize", what), method, draft_gap
        if len(size) != 2 or int(size[0]) <= 0 or int(size[1]) <= 0:
            raise ValueError(f"Resize size must be (width, height) > 0, got {size!r}")
        self.size = (int(size[0]), int(size[1]))
        images.resample_method(method)

    def _args(self):
        return (self.what, self.size) + (
            (_Raw(f"method={self.method!r}"),) if self.method != "bilinear" else ()
        )

    def _hint(self):
        if self.draft_gap:
            return (int(self.size[0] * self.draft_gap), int(self.size[1] * self.draft_gap))
        return None

    def value(self, record, size_hint=None):
        img = self.pil(record)
        if img is not None:
            return images.to_array(img)
        hint = self._hint()
        return images.resize(
            _as_image(evaluate(self.what, record, hint), hint), self.size, self.method
        )

    def pil(self, record, size_hint=None):
        img = _pil_of(self.what, record, self._hint())
        return None if img is None else images.resize_image(img, self.size, self.method)


def random_angle(seed: int, key: str) -> float:
    """Angle in [0, 360) from sha256(seed, key): the same in every process and run."""
    import hashlib  # only random rotations need it: workers of other jobs skip OpenSSL's import

    digest = hashlib.sha256(f"tar2tf-rotate\0{seed}\0{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 * 360.0


class Rotate(Op):
    """Rotate clockwise by ``angle`` degrees (same size, corners filled with 0).

    With ``angle`` None or 0 the angle is random but reproducible: it comes from
    ``sha256(seed, record key)``.  ``seed=None`` takes the job's seed (``--seed`` /
    ``Dataset(seed=...)``, default 0).
    """

    def __init__(
        self,
        what,
        angle: Optional[float] = None,
        seed: Optional[int] = None,
        method: str = "bilinear",
    ):
        self.what, self.angle, self.seed = check_what("Rotate", what), angle, seed
        self.method = method
        images.resample_method(method)

    def _args(self):
        out = [self.what]
        if self.angle:
            out.append(self.angle)
        if self.seed is not None:
            out.append(_Raw(f"seed={self.seed}"))
        return tuple(out)

    def angle_for(self, record: Record) -> float:
        if self.angle:
            return float(self.angle)
        return random_angle(self.seed or 0, str(record.get(KEY, "")))

    def value(self, record, size_hint=None):
        return images.rotate(
            _as_image(evaluate(self.what, record)), self.angle_for(record), self.method
        )


class Func(Op):
    """Call ``f(record)``.

    As a conversion: with ``ext_name`` the result is stored under that entry; without,
    ``f`` must return the new record (a dict) or None to filter the record out.
    As a value (in selections): the result itself.
    """

    _children = ()

    def __init__(self, f: Callable[[Record], Any], ext_name: Optional[str] = None):
        if not callable(f):
            raise TypeError("Func needs a callable")
        self.f, self._ext = f, ext_name

    @property
    def ext_name(self):
        return self._ext

    def _args(self):
        name = getattr(self.f, "__qualname__", None) or type(self.f).__name__
        return (_Raw(name),) + ((self._ext,) if self._ext else ())

    def value(self, record, size_hint=None):
        return self.f(record)

    def __call__(self, record):
        if self._ext is not None:
            return Op.__call__(self, record)
        return self.f(dict(record))


class Encode(Op):
    """Re-encode an image array as ``"jpeg"`` (``quality``) or ``"png"`` bytes.

    Float arrays are taken to be in [0, 1] and converted to uint8 first.  JPEG cannot
    store alpha: RGBA input is an error (use png, or ``Decode(..., channels=3)``).
    """

    def __init__(self, what, fmt: str = "jpeg", quality: int = 95):
        self.what, self.fmt, self.quality = check_what("Encode", what), fmt.lower(), int(quality)
        if images.norm_format(fmt) not in ("JPEG", "PNG"):
            raise ValueError(f"Encode supports jpeg and png, not {fmt!r}")

    def _args(self):
        return (self.what, self.fmt) + (
            (_Raw(f"quality={self.quality}"),) if self.fmt.startswith("jp") else ()
        )

    def value(self, record, size_hint=None):
        img = _pil_of(self.what, record)
        if img is not None:
            return images.encode_image(img, self.fmt, self.quality)
        return images.encode(_as_image(evaluate(self.what, record)), self.fmt, self.quality)


class _Raw(str):
    """A string shown without quotes in ``describe()``."""

    def __repr__(self):
        return str(self)


# -- helpers over lists of conversions ----------------------------------------------------


def with_seed(ops: Any, seed: int) -> Any:
    """A copy of ``ops`` where random ops without a seed get ``seed``."""

    def fix(op):
        if isinstance(op, Rotate) and op.seed is None:
            op.seed = int(seed)
        return op

    return map_ops(ops, fix)


def fuse(conversions: Sequence[Any]) -> List[Any]:
    """``Decode(e), Resize(e, size)`` -> ``Resize(Decode(e), size)`` so that JPEGs get
    DCT-domain downscaling; any other sequence is kept as is.  The fused op writes the
    same entry, so results only differ by the draft decode (bounded, tested)."""
    out: List[Any] = []
    for op in conversions:
        prev = out[-1] if out else None
        if (
            isinstance(op, Resize)
            and isinstance(op.what, str)
            and isinstance(prev, Decode)
            and isinstance(prev.what, str)
            and prev.what == op.what
        ):
            fused = Resize(prev, op.size, op.method, op.draft_gap)
            out[-1] = fused
            continue
        out.append(op)
    return out
