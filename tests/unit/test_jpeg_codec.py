"""The TurboJPEG decode path (transforms/ops/jpeg_codec.py) gives exactly Pillow's pixels.

Stated bound: zero difference.  Every JPEG here is decoded twice through
``transforms.ops.images.decode`` -- once with the TurboJPEG path switched on (it is opt-in:
``TAR2TF_JPEG_DECODER=turbo``), once with it off (Pillow) -- at full size and at the
DCT-domain scales Pillow's ``draft`` picks (1/2, 1/4, 1/8), and the arrays must be equal,
byte for byte.  The test also checks that the fast
path really took the eligible files (so equality is not Pillow against itself) and that
the files it must not take (CMYK, tiny, damaged) fall back to Pillow with Pillow's result.

This decoder belongs to the ``pillow`` image codec (``TAR2TF_IMAGE_CODEC=pillow``), which
every test here runs with; the default ``numpy`` codec is tested in
``tests/unit/test_numpy_codec.py``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from support.jpeg_cases import CASES, DRAFTS, jpeg, photo

from transforms.ops import Encode, Resize, images, jpeg_codec
from transforms.ops.stages import Stages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(not jpeg_codec.available(), reason="simplejpeg not installed")


@pytest.fixture(autouse=True)
def turbo(monkeypatch):
    """The TurboJPEG path switched on, as ``TAR2TF_JPEG_DECODER=turbo`` does, in the
    ``pillow`` codec it belongs to."""
    monkeypatch.setattr(images, "CODEC", "pillow")
    monkeypatch.setattr(jpeg_codec, "_sj", jpeg_codec._load())


@pytest.fixture
def pillow_only(monkeypatch):
    """Switch the TurboJPEG path off for one decode (the default)."""

    def run(fn):
        with monkeypatch.context() as m:
            m.setattr(jpeg_codec, "_sj", None)
            return fn()

    return run


def test_off_unless_asked_for():
    env = dict(os.environ)
    env.pop("TAR2TF_JPEG_DECODER", None)
    code = "from transforms.ops import jpeg_codec; print(jpeg_codec.enabled())"
    for value, want in ((None, "False"), ("turbo", "True"), ("pillow", "False")):
        if value:
            env["TAR2TF_JPEG_DECODER"] = value
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert out == want, (value, out)


@pytest.mark.parametrize("name,data", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize(
    "draft", DRAFTS, ids=lambda d: "full" if d is None else f"draft{d[0]}x{d[1]}"
)
def test_pixels_equal_pillows(name, data, draft, pillow_only):
    for channels in (3, None, 1):
        fast = images.decode(data, channels=channels, draft_size=draft)
        slow = pillow_only(lambda c=channels: images.decode(data, channels=c, draft_size=draft))
        assert fast.shape == slow.shape and fast.dtype == slow.dtype, (name, channels)
        assert np.array_equal(fast, slow), (
            name,
            draft,
            channels,
            int(np.abs(fast.astype(int) - slow.astype(int)).max()),
        )


@pytest.mark.parametrize(
    "name,data",
    [c for c in CASES if not c[0].startswith("97x61")],
    ids=[c[0] for c in CASES if not c[0].startswith("97x61")],
)
def test_fast_path_takes_every_plainjpeg(name, data):
    for draft in DRAFTS:
        img = Image.open(io.BytesIO(data))
        if draft:
            img.draft(None, draft)
        got = jpeg_codec.decode_like_pillow(img, data)
        assert got is not None, (name, draft)
        assert got.size == img.size and got.mode == img.mode


def test_scaled_sizes_are_pillows_draft_sizes():
    data = dict(CASES)["500x375-420-q90"]
    for hint, size in (
        ((250, 187), (250, 188)),
        ((125, 93), (125, 94)),
        ((62, 46), (63, 47)),
        ((200, 100), (250, 188)),
        ((1000, 1000), (500, 375)),
    ):
        img = Image.open(io.BytesIO(data))
        img.draft(None, hint)
        assert img.size == size
        assert jpeg_codec.decode_like_pillow(img, data).size == size


def test_cmyk_and_tiny_and_damaged_fall_back_to_pillow(pillow_only):
    cmyk = jpeg(photo(120, 80, 2).convert("CMYK"), quality=90)
    img = Image.open(io.BytesIO(cmyk))
    assert img.mode == "CMYK" and jpeg_codec.decode_like_pillow(img, cmyk) is None
    assert np.array_equal(images.decode(cmyk), pillow_only(lambda: images.decode(cmyk)))

    tiny = jpeg(photo(12, 9, 3), quality=90)
    assert jpeg_codec.decode_like_pillow(Image.open(io.BytesIO(tiny)), tiny) is None
    assert np.array_equal(images.decode(tiny), pillow_only(lambda: images.decode(tiny)))

    good = dict(CASES)["500x375-420-q90"]
    truncated = good[: len(good) // 2]
    # TurboJPEG would grey-fill the missing rows with a warning: the fast path declines,
    # and the caller gets Pillow's error, as before
    assert jpeg_codec.decode_like_pillow(Image.open(io.BytesIO(truncated)), truncated) is None
    with pytest.raises(images.ImageError) as fast_err:
        images.decode(truncated)
    with pytest.raises(images.ImageError) as slow_err:
        pillow_only(lambda: images.decode(truncated))
    assert str(fast_err.value) == str(slow_err.value)


def test_resize_and_encode_ops_keep_their_bytes(pillow_only):
    """The ops the benchmark runs give the same output bytes on both decoders."""
    for name, data in CASES:
        for ops in (
            [Encode(Resize("jpg", (224, 224)), "jpeg", quality=90)],
            [Resize("jpg", (32, 32))],
        ):
            rec = {"__key__": "k", "__shard__": "s.tar", "jpg": data}
            fast = Stages(ops).run_samples(dict(rec))["jpg"]
            slow = pillow_only(lambda ops=ops, rec=rec: Stages(ops).run_samples(dict(rec))["jpg"])
            if isinstance(fast, bytes):
                assert fast == slow, name
            else:
                assert np.array_equal(np.asarray(fast), np.asarray(slow)), name
