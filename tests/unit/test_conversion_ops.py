"""Every conversion and selection, nesting, channel rules, EXIF, draft bounds, rotation seeds."""

import io
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from support import shardgen

from transforms.ops import (
    Convert,
    Decode,
    Encode,
    Func,
    OpError,
    Resize,
    Rotate,
    Select,
    SelectDict,
    SelectJSON,
    SelectList,
    as_selection,
    fuse,
    images,
    numpy_codec,
    random_angle,
    with_seed,
)
from transforms.ops.stages import FILTERED, Stages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rec(**entries):
    return {"__key__": entries.pop("key", "k0"), "__shard__": "s.tar", **entries}


def _save(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def photo():
    return shardgen.image_array(3, (96, 64))  # real-photo crop, 96 wide, 64 high


# -- Decode -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["PNG", "BMP"])
def test_decode_lossless_formats_exact(photo, fmt):
    out = Decode("img").value(rec(img=shardgen.encode(photo, fmt)))
    assert out.dtype == np.uint8 and out.shape == (64, 96, 3)
    np.testing.assert_array_equal(out, photo)


def test_decode_jpeg_matches_tf(photo):
    import tensorflow as tf

    data = shardgen.encode(photo, "JPEG", quality=92)
    ours = Decode("jpg").value(rec(jpg=data))
    ref = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy()
    assert ours.shape == ref.shape == (64, 96, 3)
    diff = np.abs(ours.astype(int) - ref.astype(int))  # IDCT / chroma upsampling differ by rounding
    assert diff.mean() < 1.5 and diff.max() <= 6
    assert np.abs(ours.astype(int) - photo.astype(int)).mean() < 6


def test_decode_rejects_non_images_and_other_formats(photo):
    with pytest.raises(images.ImageError, match="not an image"):
        Decode("jpg").value(rec(jpg=b"hello, I am text"))
    gif = _save(Image.fromarray(photo).convert("P"), "GIF")
    with pytest.raises(images.ImageError, match="unsupported image format GIF"):
        Decode("img").value(rec(img=gif))
    png = shardgen.encode(photo, "PNG")
    with pytest.raises(images.ImageError, match="unsupported image format PNG: expected JPEG"):
        Decode("jpg", formats=("jpeg",)).value(rec(jpg=png))
    with pytest.raises(images.ImageError, match="corrupt JPEG"):
        Decode("jpg").value(rec(jpg=shardgen.encode(photo, "JPEG")[:300]))
    with pytest.raises(images.ImageError, match="corrupt JPEG"):
        Decode("jpg").value(rec(jpg=shardgen.encode(photo, "JPEG")[:-200]))
    with pytest.raises(OpError, match="record has no 'jpg' entry .*has: png"):
        Decode("jpg").value(rec(png=png))


def test_decode_rejects_png_with_a_bad_chunk_crc(photo):
    """A flipped byte inside IDAT: Pillow alone decodes it to altered pixels (it skips
    IDAT CRCs); tf.io.decode_png refuses it, and so does Decode."""
    png = shardgen.encode(photo, "PNG")
    idat = png.index(b"IDAT")
    bad = bytearray(png)
    bad[idat + 4 + 100] ^= 0xFF  # a data byte of the first IDAT chunk
    with pytest.raises(images.ImageError, match=r"corrupt PNG image: .*checksum in b'IDAT'"):
        Decode("png").value(rec(png=bytes(bad)))
    with pytest.raises(images.ImageError, match="corrupt PNG"):
        images.decode_image(bytes(bad))  # the Pillow-image path of Decode too
    np.testing.assert_array_equal(Decode("png").value(rec(png=png)), photo)


def test_channel_rules(photo):
    gray = np.asarray(Image.fromarray(photo).convert("L"))
    g = _save(Image.fromarray(gray), "PNG")
    out = Decode("p").value(rec(p=g))
    assert out.shape == (64, 96, 3) and all((out[:, :, c] == gray).all() for c in range(3))
    assert Decode("p", channels=None).value(rec(p=g)).shape == (64, 96, 1)
    np.testing.assert_array_equal(Decode("p", channels=1).value(rec(p=g))[:, :, 0], gray)

    alpha = (np.arange(64 * 96) % 256).astype(np.uint8).reshape(64, 96, 1)
    rgba = np.concatenate([photo, alpha], axis=2)
    p = _save(Image.fromarray(rgba, "RGBA"), "PNG")
    np.testing.assert_array_equal(
        Decode("p").value(rec(p=p)), photo
    )  # alpha dropped, not composited
    np.testing.assert_array_equal(Decode("p", channels=None).value(rec(p=p)), rgba)
    np.testing.assert_array_equal(
        Decode("p", channels=4).value(rec(p=shardgen.encode(photo, "PNG")))[:, :, 3], 255
    )

    pal = Image.fromarray(photo).convert("P", palette=Image.ADAPTIVE, colors=16)
    expect = np.asarray(pal.convert("RGB"))
    np.testing.assert_array_equal(Decode("p").value(rec(p=_save(pal, "PNG"))), expect)
    pal.info["transparency"] = 0
    assert Decode("p", channels=None).value(rec(p=_save(pal, "PNG", transparency=0))).shape == (
        64,
        96,
        4,
    )

    cmyk = _save(Image.fromarray(photo).convert("CMYK"), "JPEG", quality=95)
    out = Decode("j").value(rec(j=cmyk))
    assert out.shape == (64, 96, 3) and np.abs(out.astype(int) - photo.astype(int)).mean() < 8

    deep = gray.astype(np.uint16) * 257
    p16 = _save(Image.fromarray(deep, "I;16"), "PNG")
    np.testing.assert_array_equal(Decode("p", channels=1).value(rec(p=p16))[:, :, 0], gray)


def test_exif_orientation(photo):
    exif = Image.Exif()
    exif[274] = 6  # stored image must be turned 90 degrees clockwise for display
    data = _save(Image.fromarray(photo), "PNG", exif=exif.tobytes())
    up = Decode("p").value(rec(p=data))
    assert up.shape == (96, 64, 3)
    np.testing.assert_array_equal(up, np.rot90(photo, k=-1))
    np.testing.assert_array_equal(Decode("p", exif=False).value(rec(p=data)), photo)
    # with a draft decode (JPEG + Resize) the orientation is applied too
    big = shardgen.image_array(5, (400, 200))
    jpg = _save(Image.fromarray(big), "JPEG", quality=95, exif=exif.tobytes())
    small = Resize(Decode("j"), (25, 50)).value(rec(j=jpg))
    ref = images.resize(np.rot90(big, k=-1).copy(), (25, 50))
    assert small.shape == (50, 25, 3) and np.abs(small.astype(int) - ref.astype(int)).mean() < 4


# -- Convert, Resize, Rotate, Encode ----------------------------------------------------


def test_convert_scales_like_tf(photo):
    import tensorflow as tf

    r = rec(img=photo)
    f = Convert("img", tf.float32).value(r)
    np.testing.assert_array_equal(f, tf.image.convert_image_dtype(photo, tf.float32).numpy())
    back = Convert(Convert("img", "float32"), np.uint8).value(r)
    np.testing.assert_array_equal(back, photo)
    np.testing.assert_array_equal(
        Convert("img", "uint16").value(r), photo.astype(np.uint16) * 256
    )  # as TF
    np.testing.assert_array_equal(Convert(Convert("img", "uint16"), "uint8").value(r), photo)
    sat = Convert("x", "uint8").value(rec(x=np.array([-0.5, 0.0, 0.5, 1.0, 7.0], np.float32)))
    assert sat.tolist() == [0, 0, 127, 255, 255]


def test_resize_shape_dtype_and_float(photo):
    r = rec(img=photo)
    out = Resize("img", (40, 30)).value(r)
    assert out.shape == (30, 40, 3) and out.dtype == np.uint8
    f = Resize(Convert("img", "float32"), (40, 30)).value(r)
    assert f.dtype == np.float32 and f.shape == (30, 40, 3)
    assert np.abs(f * 255 - out).max() <= 1.0  # float path resizes the same way
    with pytest.raises(ValueError):
        Resize("img", (0, 3))


def test_resize_draft_close_to_full_decode():
    data = shardgen.encode(shardgen.photo(0), "JPEG", quality=90)  # 512x512 photograph
    r = rec(jpg=data)
    # the DCT-domain path really decodes fewer pixels ...
    assert images.decode(data, draft_size=(128, 128)).shape == (128, 128, 3)
    assert images.decode(data, draft_size=(300, 300)).shape == (512, 512, 3)
    # ... and stays close to a full decode + resize
    for size in [(64, 64), (100, 80)]:
        fast = Resize(Decode("jpg"), size).value(r).astype(int)
        full = Resize(Decode("jpg"), size, draft_gap=None).value(r).astype(int)
        assert fast.shape == full.shape == (size[1], size[0], 3)
        assert np.abs(fast - full).mean() < 2.0 and np.abs(fast - full).max() <= 24
    # raw bytes under Resize and Resize(Convert(Decode)) take the same path
    np.testing.assert_array_equal(
        Resize("jpg", (64, 64)).value(r), Resize(Decode("jpg"), (64, 64)).value(r)
    )


def test_rotate_clockwise_and_seeded(photo):
    sq = np.ascontiguousarray(photo[:64, :64])
    r = rec(img=sq, key="a/1")
    np.testing.assert_array_equal(Rotate("img", 90).value(r), np.rot90(sq, k=-1))  # clockwise
    np.testing.assert_array_equal(Rotate("img", 180).value(r), np.rot90(sq, k=2))
    assert Rotate("img", 30).value(rec(img=photo)).shape == photo.shape
    rnd = Rotate("img")
    a1 = rnd.value(r)
    np.testing.assert_array_equal(a1, Rotate("img", 0).value(r))  # 0 also means random
    np.testing.assert_array_equal(a1, Rotate("img", rnd.angle_for(r)).value(r))
    assert rnd.angle_for(r) == random_angle(0, "a/1")
    angles = {Rotate("img", seed=s).angle_for(rec(key=k)) for s in (0, 1) for k in ("a", "b", "c")}
    assert len(angles) == 6 and all(0 <= a < 360 for a in angles)
    assert with_seed([Rotate("img")], 7)[0].seed == 7 and rnd.seed is None  # copies, no mutation
    assert with_seed([Rotate("img", seed=3)], 7)[0].seed == 3


def test_rotate_reproducible_across_processes(photo):
    import hashlib

    code = (
        "import sys, hashlib; sys.path[:0] = [%r, %r]; from support import shardgen; from transforms.ops import Rotate;"
        "r = {'__key__': 'n01/x7', 'img': shardgen.image_array(3, (96, 64))};"
        "op = Rotate('img', seed=11); print(op.angle_for(r), hashlib.sha256(op.value(r).tobytes()).hexdigest())"
        % (ROOT, os.path.join(ROOT, "tests"))
    )
    outs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, PYTHONHASHSEED=str(s)),
        ).stdout.split()
        for s in (1, 2)
    ]
    assert outs[0] == outs[1]
    op = Rotate("img", seed=11)
    r = rec(img=photo, key="n01/x7")
    assert outs[0] == [repr(op.angle_for(r)), hashlib.sha256(op.value(r).tobytes()).hexdigest()]


def test_encode(photo):
    r = rec(img=photo)
    png = Encode("img", "png").value(r)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png))), photo)
    jpg = Encode(Resize("img", (48, 32)), "jpeg", quality=80).value(r)
    assert jpg[:2] == b"\xff\xd8" and jpg == Encode(
        Resize("img", (48, 32)), "jpeg", quality=80
    ).value(r)
    # q80 with 4:2:0 chroma on a 48x32 image; the default codec's area resize keeps more
    # detail than Pillow's bilinear (5.8 there), so the JPEG round trip loses a little more
    assert (
        np.abs(Decode("j").value(rec(j=jpg)).astype(int) - Resize("img", (48, 32)).value(r)).mean()
        < 8
    )
    assert Encode(Convert("img", "float32"), "png").value(r) == png
    rgba = np.concatenate([photo, photo[:, :, :1]], axis=2)
    with pytest.raises(ValueError, match="JPEG cannot store RGBA"):
        Encode("img", "jpeg").value(rec(img=rgba))


# -- Func, nesting, describe, pickling ---------------------------------------------------


def _add_flag(record):
    return dict(record, flag=b"1")


def test_func_and_stage_semantics(photo):
    r = rec(img=photo)
    assert Func(_add_flag)(r)["flag"] == b"1"
    out = Func(lambda rr: rr["img"].shape[0], ext_name="h")(r)
    assert out["h"] == 64 and out["img"] is photo
    assert Func(lambda rr: 5).value(r) == 5
    st = Stages([Func(lambda rr: None)])
    assert st.run_samples(r) is FILTERED
    bad = Stages([Decode("img"), Func(lambda rr: 1 / 0, ext_name="x")]).run_samples(
        rec(img=b"GIF89a")
    )
    assert (
        bad.stage == "op" and "Decode('img') failed" in bad.reason and "not an image" in bad.reason
    )


def test_nested_seed_example():
    import tensorflow as tf

    data = shardgen.jpeg(9, (300, 200))
    op = Resize(Convert(Decode("jpg"), tf.float32), (224, 224))
    assert (
        op.describe() == "Resize(Convert(Decode('jpg'), float32), (224, 224))"
        and op.ext_name == "jpg"
    )
    v = op.value(rec(jpg=data))
    assert v.shape == (224, 224, 3) and v.dtype == np.float32 and 0 <= v.min() and v.max() <= 1
    assert op(rec(jpg=data))["jpg"].shape == (224, 224, 3)  # as a conversion it rewrites "jpg"
    clone = pickle.loads(pickle.dumps(op))
    assert clone == op and np.array_equal(clone.value(rec(jpg=data)), v)
    assert fuse([Decode("jpg"), Resize("jpg", (32, 32)), Rotate("jpg", 90)]) == [
        Resize(Decode("jpg"), (32, 32)),
        Rotate("jpg", 90),
    ]


# -- selections -------------------------------------------------------------------------


def test_selections():
    doc = {"label": 3, "boxes": [[1, 2], [3, 4]], "meta": {"tags": ["a", "b"]}}
    r = rec(json=json.dumps(doc).encode(), cls=b"7", jpg=shardgen.jpeg(1))
    assert Select("cls").value(r) == b"7"
    assert SelectJSON("json", "label").value(r) == 3
    assert SelectJSON("json", ["boxes", 1, 0]).value(r) == 3
    assert SelectJSON("json", ["meta", "tags", -1]).value(r) == "b"
    assert SelectJSON("json", ["boxes"]).value(r) == [[1, 2], [3, 4]]
    with pytest.raises(
        OpError, match=r"JSON path \['meta', 'nope'\] not found in 'json': no 'nope' at \['meta'\]"
    ):
        SelectJSON("json", ["meta", "nope"]).value(r)
    with pytest.raises(OpError, match="invalid JSON in 'bad'"):
        SelectJSON("bad", "x").value(rec(bad=b"{not json"))
    lst = SelectList(["cls", SelectJSON("json", "label"), Resize(Decode("jpg"), (8, 8))]).value(r)
    assert lst[:2] == [b"7", 3] and lst[2].shape == (8, 8, 3)
    d = SelectDict({"img": Decode("jpg"), "lab": SelectJSON("json", ["meta", "tags"])}).value(r)
    assert d["img"].shape == (48, 64, 3) and d["lab"] == ["a", "b"]
    as_list = as_selection([Resize(Convert(Decode("jpg"), "float32"), (4, 4)), Select("cls")])
    assert isinstance(as_list, SelectDict) and set(as_list.value(r)) == {"jpg", "cls"}
    with pytest.raises(ValueError, match="ext_name"):
        as_selection([Func(len)])


@pytest.mark.parametrize(
    "fmt,mode,channels",
    [
        ("JPEG", "RGB", 3),
        ("JPEG", "L", 1),
        ("JPEG", "L", 3),
        ("JPEG", "CMYK", 3),
        ("PNG", "RGB", 3),
        ("PNG", "L", 1),
        ("PNG", "RGBA", 4),
        ("PNG", "RGBA", 3),
        ("PNG", "P", None),
        ("PNG", "LA", None),
    ],
)
def test_pillow_chain_equals_array_functions(photo, fmt, mode, channels, monkeypatch):
    """With the pillow codec, nested image ops stay in Pillow (no array round trips between
    them); the result must be exactly what the array functions give, for every mode, with
    and without a draft."""
    monkeypatch.setattr(images, "CODEC", "pillow")
    big = Image.fromarray(shardgen.image_array(7, (240, 160))).convert(mode)
    data = _save(big, fmt, **({"quality": 92} if fmt == "JPEG" else {}))
    r = rec(x=data)
    for size in [(48, 32), (200, 150), (240, 160)]:  # draft, no draft, same size
        op = Resize(Decode("x", channels=channels), size)
        hint = op._hint()
        want = images.resize(images.decode(data, channels, draft_size=hint), size)
        got = op.value(r)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        for out in ("png", "jpeg"):
            enc = Encode(op, out, quality=85)
            if out == "jpeg" and want.shape[2] in (2, 4):
                with pytest.raises(ValueError):
                    enc.value(r)
                continue
            assert enc.value(r) == images.encode(want, out, 85)
    # raw bytes under Resize / Encode take the same path as Decode's defaults
    np.testing.assert_array_equal(
        Resize("x", (48, 32)).value(r), Resize(Decode("x"), (48, 32)).value(r)
    )


# -- semantics shared with json / TensorFlow ----------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'\xef\xbb\xbf{"label": 3}',
        '{"label": 3}'.encode("utf-16"),
        '{"label": 3}'.encode("utf-16-be"),
        '{"label": 3}'.encode("utf-32"),
    ],
    ids=["utf-8-bom", "utf-16", "utf-16-be", "utf-32"],
)
def test_selectjson_reads_what_json_loads_reads(raw):
    """A UTF-8 BOM, UTF-16 and UTF-32 are valid JSON text (RFC 8259 parsers accept them;
    json.loads on bytes detects them, as the original API's SelectJSON did)."""
    assert json.loads(raw) == {"label": 3}
    assert SelectJSON("json", "label").value(rec(json=raw)) == 3
    assert SelectJSON("json", "label").value(rec(json=bytearray(raw))) == 3
    with pytest.raises(
        OpError, match=r"invalid JSON in 'j': not UTF-8/16/32 \(utf-8: invalid start byte"
    ):
        SelectJSON("j", "a").value(rec(j=b'{"a": "\xff"}'))


def _float_images(src):
    rng = np.random.default_rng(7)
    every_f16 = np.arange(65536, dtype=np.uint16).view(np.float16)
    one = src.type(1)
    edges = [
        0,
        1,
        0.5,
        1e-8,
        -0.0,
        -0.1,
        -1,
        1.1,
        2,
        -2,
        np.inf,
        -np.inf,
        np.finfo(src).max,
        np.nextafter(one, src.type(0)),
        np.nextafter(src.type(0), one),
        np.finfo(src).tiny,
        0.62021345,
        0.836408,
        0.25094986,
        0.6064,
        0.4226,
        0.266,
    ]
    return np.concatenate(
        [
            np.array(edges, src),
            rng.random(100_000).astype(src),
            (rng.random(10_000) * 4 - 2).astype(src),
            every_f16[np.isfinite(every_f16)].astype(src),  # NaN: undefined in TF
            np.linspace(0, 1, 65536).astype(src),
        ]
    ).reshape(-1, 1, 1)


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64], ids=lambda t: t.__name__)
@pytest.mark.parametrize("dst", ["uint8", "uint16", "int16", "int32"])
def test_convert_float_to_int_bit_identical_to_tf(src, dst):
    """TF scales by max + 0.5 in the image's float type (float64 here was off by one for
    some float32 values, ~4% of float16 -> uint8 ones, almost every one for int32) and
    saturates at the largest value of that type that fits (float32 -> int32: 2147483520).
    float16 -> uint16/int32: TF's scale overflows float16 to inf (0.5 -> 65504, 0 ->
    -2**31), so these are converted as float32 -- TF's result for the float32 cast."""
    import tensorflow as tf

    x = _float_images(np.dtype(src))
    widened = src == np.float16 and np.iinfo(dst).max + 0.5 > float(np.finfo(np.float16).max)
    ref = tf.image.convert_image_dtype(
        tf.cast(x, tf.float32) if widened else x, tf.as_dtype(dst), saturate=True
    ).numpy()
    out = Convert("x", dst).value(rec(x=x))
    assert out.dtype == np.dtype(dst) and out.shape == x.shape
    np.testing.assert_array_equal(out, ref)
    assert out[0, 0, 0] == 0 and out[1, 0, 0] == ref[1, 0, 0] > np.iinfo(dst).max * 0.99


def _png16(arr, color_type):
    import struct
    import zlib

    h, w = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _bmp32(rgba, top_down=False, alpha_mask=None):
    """A 32-bit BMP: 40-byte header (BI_RGB, as Pillow writes RGBA), or a V4 header with
    bit fields and the given alpha mask."""
    import struct

    h, w = rgba.shape[:2]
    bgra = rgba[:, :, [2, 1, 0, 3]]
    data = (bgra if top_down else bgra[::-1]).tobytes()
    hdr = 40 if alpha_mask is None else 108
    info = struct.pack(
        "<IiiHHIIiiII",
        hdr,
        w,
        -h if top_down else h,
        1,
        32,
        0 if hdr == 40 else 3,
        len(data),
        2835,
        2835,
        0,
        0,
    )
    if hdr == 108:
        info += struct.pack("<IIII", 0xFF0000, 0xFF00, 0xFF, alpha_mask) + b"\0" * 52
    off = 14 + len(info)
    return b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off) + info + data


def test_decode_16bit_gray_alpha_png_matches_tf():
    """docs/ops.md channel rules: gray + alpha keeps 2 channels also at 16 bits (Pillow
    opens it as RGBA), as tf.io.decode_png; values scaled to 8 bits as TF does."""
    import tensorflow as tf

    rng = np.random.default_rng(3)
    la16 = _png16(rng.integers(0, 65536, (4, 5, 2), dtype=np.uint16), 4)
    for ch in (None, 1, 3, 4):  # TF has no channels=2
        ref = tf.io.decode_png(la16, channels=0 if ch is None else ch).numpy()
        out = images.decode(la16, ch)
        assert out.shape == ref.shape and (ch is not None or out.shape == (4, 5, 2))
        np.testing.assert_array_equal(out, ref)
        np.testing.assert_array_equal(images.to_array(images.decode_image(la16, ch)), ref)


def test_decode_32bit_bmp_keeps_alpha_as_tf():
    """A 32-bit BMP's fourth byte is alpha for tf.io.decode_bmp, whatever the header says;
    Pillow takes it as padding without an alpha bit mask (also in the BMPs it writes
    itself), which gave 3 channels for channels=None and alpha 255 for channels=4."""
    import tensorflow as tf

    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, (5, 7, 4), dtype=np.uint8)
    pillow_bmp = _save(Image.fromarray(rgba, "RGBA"), "BMP")
    for bmp in (
        pillow_bmp,
        _bmp32(rgba),
        _bmp32(rgba, top_down=True),
        _bmp32(rgba, alpha_mask=0),
        _bmp32(rgba, alpha_mask=0xFF000000),
    ):
        for ch in (None, 3, 4):
            ref = tf.io.decode_image(
                bmp, channels=0 if ch is None else ch, expand_animations=False
            ).numpy()
            out = Decode("b", channels=ch).value(rec(b=bmp))
            np.testing.assert_array_equal(out, ref)
            np.testing.assert_array_equal(out, rgba if ch != 3 else rgba[:, :, :3])
        assert Decode("b", channels=1).value(rec(b=bmp)).shape == (5, 7, 1)  # TF: no 1-channel BMP
    with pytest.raises(images.ImageError, match="corrupt BMP"):
        Decode("b", channels=None).value(rec(b=pillow_bmp[:-20]))


@pytest.mark.parametrize("codec,max_bound", [("numpy", 90), ("pillow", 80)])
def test_resize_draft_bound_over_photos_and_aspect_ratios(codec, max_bound, monkeypatch):
    """The bound docs/ops.md states for the DCT-domain path, over photographs of several
    sizes and aspect ratios and targets of other aspect ratios (where the bound of a
    same-aspect downscale, above, does not hold: a 1024x421 photo to 32x32 differs by more),
    with each image codec."""
    import skimage.data
    from PIL import Image

    monkeypatch.setattr(images, "CODEC", codec)

    photos = [
        skimage.data.astronaut(),
        skimage.data.coffee(),
        skimage.data.chelsea(),
        skimage.data.rocket(),
    ]
    worst_mean = worst_max = 0.0
    for a in photos:
        for w, h in [(1024, 421), (421, 1024), (333, 777), (2000, 800)]:
            buf = io.BytesIO()
            Image.fromarray(a).resize((w, h), Image.BICUBIC).save(buf, "JPEG", quality=90)
            r = rec(jpg=buf.getvalue())
            for size in [(32, 32), (128, 48), (48, 128), (224, 224)]:
                fast = Resize(Decode("jpg"), size).value(r).astype(int)
                full = Resize(Decode("jpg"), size, draft_gap=None).value(r).astype(int)
                d = np.abs(fast - full)
                worst_mean, worst_max = max(worst_mean, d.mean()), max(worst_max, d.max())
    assert worst_mean < 6.0 and worst_max <= max_bound
    assert worst_mean > 2.0  # the old, tighter claim really fails on these: the test has teeth
    # draft_gap=None is exactly the full decode
    buf = io.BytesIO()
    Image.fromarray(photos[0]).resize((1024, 421)).save(buf, "JPEG", quality=90)
    r = rec(jpg=buf.getvalue())
    decoded = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    if codec == "pillow":
        full = np.asarray(decoded.resize((32, 32), Image.BILINEAR))
    else:
        cv2 = numpy_codec._cv2()
        full = cv2.resize(np.asarray(decoded), (32, 32), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(Resize(Decode("jpg"), (32, 32), draft_gap=None).value(r), full)
