"""The default ``numpy`` image codec (transforms/ops/numpy_codec.py) against the ``pillow`` one.

* Decode: the same arrays as the Pillow codec (zero difference) on every JPEG layout of
  ``tests/unit/test_jpeg_codec.py``, at full size and at the DCT scales, for 1, 3, 4 and native
  channels -- and the numpy path really decoded the eligible ones.
* Fallbacks to Pillow, with Pillow's result or error: PNG, CMYK, EXIF orientation,
  colour JPEG to one channel, truncated data, a format not allowed, too many pixels.
* Resize: quality against a Lanczos reference at least the Pillow codec's (PSNR, on the
  benchmark's images); shapes for 2-D, one-channel, mixed shrink/enlarge; the result does
  not depend on OpenCV's thread count.
* Encode: JPEG round trip as close as Pillow's encoder; grey; out-of-range quality and
  alpha go to Pillow.
"""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from support import jpeg_cases as tj
from support import shardgen

from transforms.ops import Decode, Encode, Resize, image_limits, images, jpeg_codec, numpy_codec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def numpy_default(monkeypatch):
    monkeypatch.setattr(images, "CODEC", "numpy")
    monkeypatch.setattr(jpeg_codec, "_sj", None)  # the pillow codec as it runs by default


def _with(codec, fn):
    prev = images.CODEC
    images.CODEC = codec
    try:
        return fn()
    finally:
        images.CODEC = prev


def _pillow(fn):
    return _with("pillow", fn)


def _rec(**kw):
    return dict({"__key__": "k", "__shard__": "s.tar"}, **kw)


# -- decode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name,data", tj.CASES, ids=[c[0] for c in tj.CASES])
def test_decode_equals_the_pillow_codec(name, data):
    gray = name.endswith("-gray")
    for draft in tj.DRAFTS:
        for channels in (3, None, 1, 4):
            fast = images.decode(data, channels=channels, draft_size=draft)
            slow = _pillow(
                lambda c=channels, d=draft: images.decode(data, channels=c, draft_size=d)
            )
            assert fast.shape == slow.shape and fast.dtype == slow.dtype, (name, draft, channels)
            assert np.array_equal(fast, slow), (name, draft, channels)
            took = images._decode_numpy(data, channels, images.FORMATS, True, draft)
            # EXIF-rotated files and Pillow's luma of colour JPEGs stay on Pillow
            want = name != "exif-rotated" and (channels != 1 or gray)
            assert (took is not None) == want, (name, draft, channels)


def test_exif_false_takes_the_numpy_path_with_pillows_pixels():
    data = dict(tj.CASES)["exif-rotated"]
    took = images._decode_numpy(data, 3, images.FORMATS, False, None)
    assert took is not None and took.shape == (200, 320, 3)
    assert np.array_equal(took, _pillow(lambda: images.decode(data, exif=False)))
    assert images.decode(data).shape == (320, 200, 3)  # upright, by Pillow


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_reader_agrees_with_pillow(orientation):
    exif = Image.Exif()
    exif[274] = orientation
    exif[271] = "camera maker"  # another tag before it
    data = tj.jpeg(tj.photo(64, 48, 1), quality=90, exif=exif.tobytes())
    assert numpy_codec.exif_orientation(data) == orientation
    assert Image.open(io.BytesIO(data)).getexif()[274] == orientation


def test_exif_orientation_reader_without_exif_or_tag():
    plain = tj.jpeg(tj.photo(64, 48, 1), quality=90)
    assert numpy_codec.exif_orientation(plain) == 1
    exif = Image.Exif()
    exif[271] = "no orientation"
    assert numpy_codec.exif_orientation(tj.jpeg(tj.photo(64, 48, 1), exif=exif.tobytes())) == 1
    assert numpy_codec.exif_orientation(b"\xff\xd8\x00garbage") is None


def test_fallbacks_give_pillows_result():
    photo = shardgen.image_array(4, (120, 80))
    rgba = np.dstack([photo, np.full(photo.shape[:2], 200, np.uint8)])
    cases = {
        "png-rgb": shardgen.encode(photo, "PNG"),
        "png-rgba": shardgen.encode(rgba, "PNG"),
        "png-gray": shardgen.encode(photo[:, :, 0], "PNG"),
        "bmp": shardgen.encode(photo, "BMP"),
        "cmyk": tj.jpeg(Image.fromarray(photo).convert("CMYK"), quality=90),
        "tiny": tj.jpeg(tj.photo(12, 9, 3), quality=90),
    }
    for name, data in cases.items():
        if name in ("cmyk", "tiny"):
            assert images._decode_numpy(data, 3, images.FORMATS, True, None) is None, name
        for channels in (3, None, 1):
            fast = images.decode(data, channels=channels)
            assert np.array_equal(
                fast, _pillow(lambda c=channels, b=data: images.decode(b, channels=c))
            )


def _error(fn):
    with pytest.raises(images.ImageError) as e:
        fn()
    return str(e.value)


def test_bad_input_keeps_pillows_errors(monkeypatch):
    good = dict(tj.CASES)["500x375-420-q90"]
    truncated = good[: len(good) // 2]
    assert _error(lambda: images.decode(truncated)) == _error(
        lambda: _pillow(lambda: images.decode(truncated))
    )
    msg = _error(lambda: images.decode(good, formats=("png",)))
    assert msg == _error(lambda: _pillow(lambda: images.decode(good, formats=("png",))))
    assert "unsupported image format JPEG" in msg
    monkeypatch.setattr(image_limits, "max_pixels", 1000)
    msg = _error(lambda: images.decode(good))
    assert msg == _error(lambda: _pillow(lambda: images.decode(good)))
    assert "500x375 = 187500 pixels > max-image-pixels 1000" in msg


def test_bad_codec_name_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(images, "CODEC", "opencv")
    with pytest.raises(ValueError, match="image codec must be one of numpy, pillow"):
        images.decode(dict(tj.CASES)["500x375-420-q90"])


def test_a_missing_library_is_one_clear_reason(monkeypatch):
    monkeypatch.setattr(numpy_codec, "_libs", {})
    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 raises ImportError
    photo = shardgen.image_array(5, (120, 80))
    with pytest.raises(ImportError) as e:
        images.resize(photo, (60, 40))
    assert str(e.value) == (
        "the numpy image codec needs opencv-python-headless (pip install "
        "opencv-python-headless); or set TAR2TF_IMAGE_CODEC=pillow"
    )


def test_codec_comes_from_the_environment():
    code = "from transforms.ops import images; print(images.CODEC)"
    for value, want in ((None, "numpy"), ("pillow", "pillow"), ("Numpy", "numpy"), ("", "numpy")):
        env = {k: v for k, v in os.environ.items() if k != "TAR2TF_IMAGE_CODEC"}
        if value is not None:
            env["TAR2TF_IMAGE_CODEC"] = value
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert out.stdout.strip() == want, (value, out.stderr)


# -- resize ---------------------------------------------------------------------------------


def _psnr_pair(data: bytes, size, encode: bool):
    """PSNR of (numpy codec, pillow codec) outputs against Pillow's Lanczos of the full decode."""
    from benchmarks.codec import psnr, reference

    ref = reference(data, size)
    if encode:
        op = Encode(Resize("jpg", size), "jpeg", quality=90)
    else:
        op = Resize("jpg", size)
    out = []
    for codec in ("numpy", "pillow"):
        v = _with(codec, lambda: op.value(_rec(jpg=data)))
        if encode:
            v = np.asarray(Image.open(io.BytesIO(v)).convert("RGB"))
        out.append(psnr(v, ref))
    return out


@pytest.mark.parametrize(
    "size,encode", [((224, 224), True), ((224, 224), False), ((32, 32), False)]
)
def test_quality_at_least_the_pillow_codecs(size, encode):
    """The stated bound (docs/benchmarks.md): the numpy codec's PSNR against a Lanczos
    reference is at least the Pillow codec's, in median and minimum, on the benchmark's
    images (each resize with its DCT-domain decode, as the ops run)."""
    from benchmarks import dataset

    pairs = [_psnr_pair(dataset.make_image(i)[0], size, encode) for i in range(12)]
    fast, slow = zip(*pairs)
    assert statistics.median(fast) >= statistics.median(slow), pairs
    assert min(fast) >= min(slow), pairs


def test_resize_shapes_and_dtypes():
    photo = shardgen.image_array(5, (120, 80))
    for size in [(60, 40), (240, 160), (60, 160), (240, 40), (120, 80)]:
        w, h = size
        assert images.resize(photo, size).shape == (h, w, 3)
        assert images.resize(photo[:, :, :1], size).shape == (h, w, 1)
        assert images.resize(photo[:, :, 0], size).shape == (h, w)
        f = images.resize(photo.astype(np.float32) / 255, size)
        assert f.dtype == np.float32 and f.shape == (h, w, 3)
    # uint16 and 2 channels: Pillow's per-channel path, as with the pillow codec
    for arr in (photo.astype(np.uint16) * 256, photo[:, :, :2]):
        got = images.resize(arr, (60, 40))
        assert np.array_equal(got, _pillow(lambda a=arr: images.resize(a, (60, 40))))
    # other methods than the default stay Pillow's filters
    got = images.resize(photo, (60, 40), "lanczos")
    assert np.array_equal(got, _pillow(lambda: images.resize(photo, (60, 40), "lanczos")))


def test_area_through_float32_equals_opencvs_uint8_area():
    """numpy_codec shrinks uint8 images through float32 (faster): the same pixels as
    OpenCV's uint8 INTER_AREA on the benchmark's images."""
    from benchmarks import dataset

    cv2 = numpy_codec._cv2()
    for i in range(16):
        arr = images.decode(dataset.make_image(i)[0])
        for size in [(224, 224), (100, 300), (37, 23)]:
            want = cv2.resize(arr, size, interpolation=cv2.INTER_AREA)
            assert np.array_equal(numpy_codec.resize(arr, *size), want), (i, size)


def test_enlarging_is_bilinear_close_to_pillows():
    photo = shardgen.image_array(6, (64, 48))
    fast = images.resize(photo, (160, 120)).astype(int)
    slow = _pillow(lambda: images.resize(photo, (160, 120))).astype(int)
    assert np.abs(fast - slow).mean() < 1.0 and np.abs(fast - slow).max() <= 8


def test_resize_does_not_depend_on_opencvs_thread_count():
    cv2 = numpy_codec._cv2()
    photo = shardgen.image_array(7, (1000, 750))
    sizes = [(224, 224), (333, 1000), (50, 37)]
    try:
        want = [numpy_codec.resize(photo, *s) for s in sizes]
        cv2.setNumThreads(4)
        got = [numpy_codec.resize(photo, *s) for s in sizes]
    finally:
        cv2.setNumThreads(1)
    for a, b in zip(want, got):
        assert np.array_equal(a, b)
    assert cv2.getNumThreads() == 1


# -- encode ---------------------------------------------------------------------------------


def test_jpeg_encode_is_as_close_as_pillows():
    photo = shardgen.image_array(3, (96, 64))
    for q in (80, 90, 95):
        errs = []
        for codec in ("numpy", "pillow"):
            jpg = _with(codec, lambda q=q: images.encode(photo, "jpeg", q))
            assert jpg[:2] == b"\xff\xd8"
            back = np.asarray(Image.open(io.BytesIO(jpg)))
            errs.append(np.abs(back.astype(int) - photo).mean())
        assert errs[0] <= errs[1] + 0.1, (q, errs)
    # deterministic
    assert images.encode(photo, "jpeg", 90) == images.encode(photo, "jpeg", 90)


def test_jpeg_encode_gray_alpha_and_odd_qualities():
    photo = shardgen.image_array(3, (96, 64))
    for gray in (photo[:, :, 0], photo[:, :, :1]):
        jpg = images.encode(gray, "jpeg", 90)
        img = Image.open(io.BytesIO(jpg))
        assert img.mode == "L" and img.size == (96, 64)
    rgba = np.dstack([photo, np.full(photo.shape[:2], 255, np.uint8)])
    with pytest.raises(ValueError, match="JPEG cannot store RGBA"):
        images.encode(rgba, "jpeg")
    # qualities TurboJPEG does not take: Pillow's bytes
    assert images.encode(photo, "jpeg", 0) == _pillow(lambda: images.encode(photo, "jpeg", 0))
    assert images.encode(photo, "png") == _pillow(lambda: images.encode(photo, "png"))


def test_chained_ops_use_the_numpy_path():
    """Encode(Resize(Decode)) gives the array functions' result (no Pillow chain)."""
    data = dict(tj.CASES)["500x375-420-q90"]
    r = _rec(jpg=data)
    arr = images.resize(images.decode(data, draft_size=(448, 448)), (224, 224))
    assert np.array_equal(Resize(Decode("jpg"), (224, 224)).value(r), arr)
    assert Encode(Resize("jpg", (224, 224)), "jpeg", quality=90).value(r) == images.encode(
        arr, "jpeg", 90
    )
    slow = _pillow(lambda: Encode(Resize("jpg", (224, 224)), "jpeg", quality=90).value(r))
    assert slow != images.encode(arr, "jpeg", 90)
