"""PCR end to end: ImageFolder and tar inputs through the Beam converter, read back at
every scan group, lossless at the full level, rejects, bytes read, verification."""

import hashlib
import io
import os
import subprocess

import numpy as np
import pytest
from PIL import Image
from support.pcr_fixtures import (
    bad_files,
    convert_local,
    decode,
    encode,
    make_image_folder,
    make_tar,
    photo,
    requires_jpegtran,
    sample_images,
)

from transforms.pcr import format as fmt
from transforms.pcr import jpeg_scans as js
from transforms.pcr import pcr_pb2
from transforms.pcr import reader as pcr_reader
from transforms.pcr.verify import verify_pcr

pytestmark = requires_jpegtran
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards")


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pcr_folder")
    files = dict(sample_images(), **bad_files())
    root = make_image_folder(str(tmp / "folder"), files)
    before = {rel: sha(os.path.join(root, rel)) for rel in files}
    out, res = convert_local(tmp, root, images_per_record=4)
    return files, root, before, out, res


def test_image_folder_conversion_accounts_for_every_file(folder_run):
    files, root, before, out, res = folder_run
    t = res.totals
    assert t["records_read"] == len(files) == t["records_written"] + t["records_rejected"]
    assert t["records_written"] == 6 and t["records_rejected"] == 3
    rejects = {r["key"]: r for r in map(__import__("json").loads, open(res.rejects_path))}
    assert rejects["dog/bad_text.jpg"]["reason"].startswith("not an image")
    assert rejects["dog/bad_truncated.jpg"]["reason"].startswith("jpegtran rejected")
    assert rejects["dog/bad_png.png"]["reason"].startswith("undecodable image")
    assert {r["stage"] for r in rejects.values()} == {"encode"}
    assert res.manifest["kind"] == "pcr" and res.manifest["classes"] == ["cat", "dog"]
    # inputs never modified
    assert {rel: sha(os.path.join(root, rel)) for rel in files} == before
    # 6 images, 4 per record: the last record is partial and written once
    assert [s["records"] for s in res.manifest["shards"]] == [4, 2]
    assert sorted(os.listdir(out)) == [
        "PCR.manifest.json",
        "PCR.rejects.jsonl",
        "PCR_0.db",
        "PCR_1.db",
        "PCR_index.pb",
    ]
    for s in res.manifest["shards"]:
        assert sha(s["path"]) == s["sha256"] and os.path.getsize(s["path"]) == s["bytes"]
    assert verify_pcr(out) == []


def test_every_level_decodes_and_full_level_is_the_source(folder_run):
    files, _, _, out, res = folder_run
    index = os.path.join(out, fmt.INDEX_NAME)
    labels = {"cat": 0, "dog": 1}
    for k in range(1, js.SCAN_GROUPS + 1):
        items = list(pcr_reader.iter_pcr(res.paths, index, k, with_keys=True))
        assert sorted(key for key, _, _ in items) == sorted(k_ for k_ in sample_images())
        for key, jpeg, label in items:
            assert label == labels[key.split("/")[0]]
            img = decode(jpeg)
            src = decode(files[key])
            assert img.shape == src.shape
            if k == js.SCAN_GROUPS and not key.endswith(".png"):
                assert np.array_equal(img, src), key  # lossless for JPEG inputs, CMYK and gray too
    png = next(
        j
        for key, j, _ in pcr_reader.iter_pcr(res.paths, index, 10, with_keys=True)
        if key.endswith(".png")
    )
    diff = decode(png).astype(float) - decode(files["dog/e_png.png"])[..., :3]
    assert 10 * np.log10(255**2 / np.mean(diff**2)) > 30  # encoded once, at quality 90
    meta = pcr_pb2.MetadataRecord.FromString(
        open(res.paths[0], "rb").read()[: fmt.read_index(index)[1]["PCR_0.db"].lengths[0]]
    )
    info = {im.key: im for im in meta.images}
    assert (
        info["cat/b_gray.jpg"].scan_map == "gray-6"
        and info["cat/c_cmyk.jpg"].scan_map == "4comp-18"
    )
    assert info["cat/a_colour.jpg"].lossless and info["cat/c_cmyk.jpg"].components == 4


def test_tf_dataset_matches_python_iterator(folder_run):
    _, _, _, out, res = folder_run
    index = os.path.join(out, fmt.INDEX_NAME)
    for k in (1, 4, 10, 11):
        py = list(pcr_reader.iter_pcr(res.paths, index, k))
        tf_items = [
            (bytes(j), int(label))
            for j, label in pcr_reader.ProgressiveCompressedRecordDataset(
                res.paths, index, k
            ).as_numpy_iterator()
        ]
        assert tf_items == py
    decoded = list(
        pcr_reader.ProgressiveCompressedRecordDataset(
            res.paths, index, 2, decode=True
        ).as_numpy_iterator()
    )
    assert all(img.ndim == 3 and img.shape[2] == 3 for img, _ in decoded)
    # no files (a worker's share of a split with fewer files than workers): no elements
    empty = pcr_reader.ProgressiveCompressedRecordDataset([], index, 3)
    assert list(empty.as_numpy_iterator()) == [] and list(pcr_reader.iter_pcr([], index, 3)) == []
    assert (
        empty.element_spec
        == pcr_reader.ProgressiveCompressedRecordDataset(res.paths, index, 3).element_spec
    )


def _rchar():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.slow
def test_bytes_read_are_the_index_prefix(folder_run):
    _, _, _, out, res = folder_run
    index = os.path.join(out, fmt.INDEX_NAME)
    _, entries = fmt.read_index(index)
    counted = {}

    class Counting(io.RawIOBase):
        def __init__(self, path):
            self.f, self.path = open(path, "rb", buffering=0), path

        def readinto(self, b):
            n = self.f.readinto(b)
            counted[self.path] = counted.get(self.path, 0) + n
            return n

        def close(self):
            self.f.close()
            super().close()

    for k in range(1, 13):
        counted.clear()
        list(pcr_reader.iter_pcr(res.paths, index, k, opener=Counting))
        for p in res.paths:
            e = fmt.lookup(entries, p)
            assert counted[p] == sum(e.lengths[: min(k, 10) + 1])
            assert (counted[p] < os.path.getsize(p)) == (k < 10)
    # TensorFlow reads through its own file system: count the process's read bytes
    if not os.path.exists("/proc/self/io"):
        pytest.skip("no /proc/self/io to count TensorFlow's reads")

    def iterate(k):
        ds = pcr_reader.ProgressiveCompressedRecordDataset(res.paths, index, k)
        before = _rchar()
        n = sum(1 for _ in ds)
        return _rchar() - before, n

    for k in (1, 3, 10):
        list(pcr_reader.ProgressiveCompressedRecordDataset(res.paths, index, k).take(1))  # warm up
        # /proc/self/io counts every thread of this process, and TensorFlow's runtime threads
        # sometimes read a few kB of their own meanwhile (seen once in CI: +1.9 kB); that
        # noise only adds, so the fewest bytes of three passes are the dataset's own reads
        read, n = min(iterate(k) for _ in range(3))
        expect = sum(fmt.lookup(entries, p).prefix(k) for p in res.paths)
        assert n == 6 and expect <= read <= expect + 1024, (k, read, expect)


@pytest.fixture(scope="module")
def tar_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pcr_tar")
    good = encode(photo("coffee", (48, 32)))
    bad = make_tar(
        str(tmp / "bad.tar"),
        [
            ("x/ok", {"jpg": good, "cls": b"7"}),
            ("x/nolabel", {"jpg": good}),
            ("x/badlabel", {"jpg": good, "cls": b"seven"}),
            ("x/text", {"jpg": b"hello", "cls": b"1"}),
            ("x/noimage", {"txt": b"hello", "cls": b"1"}),
            ("x/cut", {"jpg": good[: len(good) // 2], "cls": b"1"}),
            ("x/head", {"jpg": good[:40], "cls": b"1"}),
        ],
    )
    sources = [os.path.join(DEMO, "demo-{0..1}.tar"), bad, str(tmp / "missing.tar")]
    out, res = convert_local(tmp, sources, images_per_record=20, seed=5)
    return bad, out, res, good


def test_tar_inputs_labels_and_rejects(tar_run):
    import tarfile

    bad, out, res, good = tar_run
    t = res.totals
    assert t["records_read"] == 48 + 7 == t["records_written"] + t["records_rejected"]
    assert t["records_written"] == 49 and t["shards_rejected"] == 1  # missing.tar: a list reject
    reasons = {
        r["key"]: r["reason"].split(":")[0]
        for r in map(__import__("json").loads, open(res.rejects_path))
    }
    assert reasons == {
        None: "missing shard",
        "x/nolabel": "no label",
        "x/badlabel": "bad label",
        "x/text": "not an image",
        "x/noimage": "no image",
        "x/cut": "jpegtran rejected",
        "x/head": "undecodable image",
    }
    assert [s["records"] for s in res.manifest["shards"]] == [20, 20, 9]
    expect = {"x/ok": (good, 7)}
    for shard in ("demo-0.tar", "demo-1.tar"):
        with tarfile.open(os.path.join(DEMO, shard)) as tf:
            members = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
        for name, data in members.items():
            if name.endswith(".jpg"):
                key = name[:-4]
                expect[key] = (data, int(members[key + ".cls"]))
    got = list(
        pcr_reader.iter_pcr(res.paths, os.path.join(out, fmt.INDEX_NAME), 10, with_keys=True)
    )
    assert sorted(k for k, _, _ in got) == sorted(expect)
    for key, jpeg, label in got:
        assert label == expect[key][1]
        assert np.array_equal(decode(jpeg), decode(expect[key][0]))
    assert verify_pcr(out) == []


def test_seed_orders_images_and_no_seed_keeps_input_order(tar_run, tmp_path):
    _, out, res, _ = tar_run
    shuffled = [
        k
        for k, _, _ in pcr_reader.iter_pcr(
            res.paths, os.path.join(out, fmt.INDEX_NAME), 1, with_keys=True
        )
    ]
    out2, res2 = convert_local(
        tmp_path, os.path.join(DEMO, "demo-{0..1}.tar"), images_per_record=100
    )
    plain = [
        k
        for k, _, _ in pcr_reader.iter_pcr(
            res2.paths, os.path.join(out2, fmt.INDEX_NAME), 1, with_keys=True
        )
    ]
    demo_keys = [k for k in shuffled if not k.startswith("x/")]
    assert sorted(demo_keys) == sorted(plain) and demo_keys != plain
    assert plain == sorted(plain, key=lambda k: int(k.rsplit("img", 1)[1]))  # tar order


def test_overwrite_replaces_and_removes_stale_records(tmp_path):
    from pipelines.job.refused import OutputExistsError

    root = make_image_folder(
        str(tmp_path / "f"),
        {f"c/{i}.jpg": encode(photo("chelsea", (32, 24 + 8 * i))) for i in range(3)},
    )
    out, res = convert_local(tmp_path, root, images_per_record=1)
    assert len(res.paths) == 3
    with pytest.raises(OutputExistsError):
        convert_local(tmp_path, root, images_per_record=2)
    out, res = convert_local(tmp_path, root, images_per_record=2, overwrite=True)
    assert sorted(f for f in os.listdir(out) if f.startswith("PCR_")) == [
        "PCR_0.db",
        "PCR_1.db",
        "PCR_index.pb",
    ]
    assert verify_pcr(out) == []
    assert not os.path.exists(os.path.join(out, ".tar2tf-work"))


def test_verify_finds_damage(folder_run, tmp_path):
    import shutil

    _, _, _, out, _ = folder_run
    d = str(tmp_path / "copy")
    shutil.copytree(out, d)
    assert verify_pcr(d) == []
    _, entries = fmt.read_index(os.path.join(d, fmt.INDEX_NAME))
    rec = os.path.join(d, "PCR_0.db")
    data = bytearray(open(rec, "rb").read())
    pos = entries["PCR_0.db"].prefix(3) + 5  # inside scan group 4
    data[pos] ^= 0x55
    open(rec, "wb").write(bytes(data))
    problems = verify_pcr(d)
    assert any("PCR_0.db: chunk 4 CRC-32C mismatch" in p for p in problems)
    open(os.path.join(d, "PCR_1.db"), "ab").write(b"x")
    open(os.path.join(d, "PCR_7.db"), "wb").write(b"x")
    problems = verify_pcr(d)
    assert any(p.startswith("PCR_1.db:") and "index says" in p for p in problems)
    assert "PCR_7.db: record file not in the index" in problems
    os.unlink(os.path.join(d, fmt.INDEX_NAME))
    assert verify_pcr(d)[0].endswith("missing")


def test_exif_orientation_is_applied_losslessly_when_possible():
    from PIL import ImageOps
    from support.pcr_fixtures import exif_orientation

    from transforms.pcr.image import to_progressive

    aligned = encode(photo("astronaut", (64, 48)), exif=exif_orientation(6))
    p = to_progressive(aligned)
    assert p.orientation == 6 and p.lossless
    upright = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(aligned))))
    img = decode(p.data)
    assert img.shape == upright.shape == (64, 48, 3)
    # the DCT coefficients were rotated, not re-quantised: rotating back gives the source
    # pixels exactly; the upright decode differs from rotated pixels by IDCT rounding only
    back = subprocess.run(
        ["jpegtran", "-rotate", "270"], input=p.data, capture_output=True, check=True
    ).stdout
    assert np.array_equal(decode(back), decode(aligned))
    assert np.abs(img.astype(int) - upright).max() <= 3
    assert b"Exif" not in p.data  # -copy none: the orientation is not applied twice by viewers
    odd = encode(photo("astronaut", (70, 50)), exif=exif_orientation(8))
    q = to_progressive(odd)
    assert q.orientation == 8 and not q.lossless
    img = decode(q.data)
    ref = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(odd))))
    assert img.shape == ref.shape == (70, 50, 3)
    assert 10 * np.log10(255**2 / np.mean((img.astype(float) - ref) ** 2)) > 30


def _damaged_jpeg(orientation):
    """A JPEG whose entropy data jpegtran reports as corrupt (an RST marker mid-scan)."""
    from support.pcr_fixtures import exif_orientation

    src = encode(photo("chelsea", (64, 48)), exif=exif_orientation(orientation))
    sos = src.rfind(b"\xff\xda")
    mid = sos + (len(src) - sos) // 2
    bad = src[:mid] + b"\xff\xd3" + src[mid:]
    r = subprocess.run(["jpegtran", "-copy", "none"], input=bad, capture_output=True)
    assert r.returncode == 2 and b"Corrupt JPEG data" in r.stderr
    return bad


@pytest.mark.parametrize("orientation", [1, 6, 8])
def test_damaged_jpeg_is_rejected_whatever_its_orientation(orientation):
    # with an EXIF turn the -perfect attempt fails on the damage too; the lossy way (Pillow
    # decodes damaged data silently) must not take it
    from transforms.pcr.image import ImageRejected, to_progressive

    with pytest.raises(ImageRejected, match="jpegtran rejected: .*Corrupt JPEG data"):
        to_progressive(_damaged_jpeg(orientation))


def test_jpeg_size_is_not_limited_by_pillows_pixel_guard(monkeypatch):
    # stands in for a >89 MP JPEG: only its header is parsed in Python, jpegtran converts it
    from support.pcr_fixtures import exif_orientation

    from transforms.pcr.image import ImageRejected, to_progressive

    data = encode(photo("chelsea", (64, 48)))
    turned = encode(photo("chelsea", (64, 48)), exif=exif_orientation(6))
    png = encode(photo("chelsea", (64, 48)), "PNG")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    assert to_progressive(data).lossless
    assert to_progressive(turned).orientation == 6
    # where pixels are decoded, the guard stands, with a reason that says so
    with pytest.raises(ImageRejected, match="^image too large to decode: "):
        to_progressive(png)


def test_tiff_orientation_is_recorded():
    from transforms.pcr.image import to_progressive

    img = photo("chelsea", (40, 30))
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    img.save(buf, "TIFF", exif=exif)
    p = to_progressive(buf.getvalue())
    assert p.source_format == "TIFF" and p.orientation == 6
    assert decode(p.data).shape == (40, 30, 3)  # turned upright: 30 x 40 -> 40 rows


def test_cli_exit_codes(tmp_path, capsys):
    from launch.cli import main

    root = make_image_folder(str(tmp_path / "f"), dict(sample_images(), **{"dog/x.jpg": b"nope"}))
    out = str(tmp_path / "o")
    assert (
        main(["pcr", root, "--output", out, "--images-per-record", "3", "--direct_num_workers=2"])
        == 3
    )
    err = capsys.readouterr().err
    assert "1 rejects > --max-rejects 0" in err and "not an image" in err
    assert main(["pcr", root, "--output", out]) == 4
    assert main(["pcr", root, "--output", out, "--overwrite", "--max-rejects", "1"]) == 0
    assert main(["pcr", root, "--output", out, "--overwrite", "--images-per-record", "0"]) == 2
