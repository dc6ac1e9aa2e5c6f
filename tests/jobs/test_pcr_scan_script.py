"""``tar2tf pcr --scans FILE``: a custom jpegtran scan script, checked before the job, carried
as text to the workers, recorded in the index and manifest; loading k groups reads the
prefix and decodes; output is deterministic; ``--resume`` with another script is refused."""

import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from support.pcr_fixtures import (
    convert_local,
    decode,
    jpeg_of,
    make_image_folder,
    reference_classes,
    requires_jpegtran,
    sample_images,
)

from transforms.pcr import format as fmt
from transforms.pcr import jpeg_scans as js
from transforms.pcr import pcr_pb2
from transforms.pcr import quality as pcr_quality
from transforms.pcr import reader as pcr_reader
from transforms.pcr import scan_script as pcr_scan_script
from transforms.pcr.verify import verify_pcr

pytestmark = requires_jpegtran
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..1}.tar")
SCRIPT = os.path.join(ROOT, "docs", "scans", "chroma-coarse.txt")
LEVELS = (1, 2, 5, 6, 9, 10, 12)


def _demo_jpegs():
    import tarfile

    out = {}
    for i in (0, 1):
        with tarfile.open(DEMO.replace("{0..1}", str(i))) as tf:
            for m in tf.getmembers():
                if m.name.endswith(".jpg"):
                    out[m.name[:-4]] = tf.extractfile(m).read()
    return out


def _jpegtran_scans(src: bytes) -> bytes:
    """What jpegtran itself makes of ``src`` with the example script (the reference)."""
    return subprocess.run(
        ["jpegtran", "-copy", "none", "-optimize", "-progressive", "-scans", SCRIPT],
        input=src,
        capture_output=True,
        check=True,
    ).stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pcr_scans")
    custom = convert_local(tmp, DEMO, "custom", images_per_record=20, scans=SCRIPT)
    standard = convert_local(tmp, DEMO, "standard", images_per_record=20)
    return custom, standard


class _Counting(io.RawIOBase):
    counted = {}

    def __init__(self, path):
        self.f, self.path = open(path, "rb", buffering=0), path

    def readinto(self, b):
        n = self.f.readinto(b)
        self.counted[self.path] = self.counted.get(self.path, 0) + n
        return n

    def close(self):
        self.f.close()
        super().close()


def test_k_groups_are_the_prefix_of_jpegtrans_own_output_and_decode(runs):
    (out, res), _ = runs
    assert res.exit_code == 0 and res.totals["records_written"] == 48
    index = os.path.join(out, fmt.INDEX_NAME)
    _, entries = fmt.read_index(index)
    src = _demo_jpegs()
    ref = {key: js.split_pieces(_jpegtran_scans(data)) for key, data in src.items()}
    assert {len(p) for p in ref.values()} == {12}
    for k in LEVELS:
        _Counting.counted.clear()
        items = list(pcr_reader.iter_pcr(res.paths, index, k, with_keys=True, opener=_Counting))
        assert sorted(key for key, _, _ in items) == sorted(src)
        for p in res.paths:  # one sequential read of exactly the indexed prefix
            assert _Counting.counted[p] == fmt.lookup(entries, p).prefix(k)
        for key, jpeg, _ in items:
            # identity map: scan i is group i, scans 11 and 12 join group 10
            assert jpeg == jpeg_of(ref[key][: k if k < 10 else 12]), (key, k)
            img = decode(jpeg)
            assert img.shape == decode(src[key]).shape
            if k >= 10:
                assert np.array_equal(img, decode(src[key])), key  # lossless at the full level
    assert verify_pcr(out) == []


def test_the_script_is_recorded_in_index_manifest_and_images(runs):
    (out, res), (std_out, std_res) = runs
    text = open(SCRIPT).read()
    idx, _ = fmt.read_index(os.path.join(out, fmt.INDEX_NAME))
    assert idx.scan_script == text and [m.name for m in idx.scan_maps] == ["identity"]
    manifest = json.load(open(res.manifest_path))
    assert manifest["options"]["scan_script"] == text and manifest["options"]["scans"] == SCRIPT
    meta = pcr_pb2.MetadataRecord.FromString(
        open(res.paths[0], "rb").read()[: idx.records[0].offsets64[0]]
    )
    assert {im.scan_map for im in meta.images} == {"identity"}
    # the standard script: the index has no scan_script field at all, the manifest says null
    std_idx, _ = fmt.read_index(os.path.join(std_out, fmt.INDEX_NAME))
    assert "scan_script" not in [f.name for f, _ in std_idx.ListFields()]
    assert json.load(open(std_res.manifest_path))["options"]["scan_script"] is None
    # a reader that knows only the reference schema still reads the index and the records
    ref = reference_classes("proto3")
    ref_idx = ref["DatasetOffsetsIndex"].FromString(
        open(os.path.join(out, fmt.INDEX_NAME), "rb").read()
    )
    assert [r.name for r in ref_idx.records] == [os.path.basename(p) for p in res.paths]
    assert [list(r.offsets) for r in ref_idx.records] == [list(r.offsets64) for r in idx.records]


def test_pcr_report_names_the_script(runs):
    (out, _), _ = runs
    text = open(SCRIPT).read()
    rep = pcr_quality.report(out, sample=0)
    assert rep["scan_script"] == text
    assert (
        f"scans: custom script, 12 scans (sha256 {pcr_scan_script.digest(text)[:12]}"
        in pcr_quality.format_table(rep)
    )


def test_group_five_is_smaller_than_with_the_standard_script(runs):
    (out, res), (std_out, std_res) = runs

    def entries(o, r):
        _, index = fmt.read_index(os.path.join(o, fmt.INDEX_NAME))
        return [fmt.lookup(index, p) for p in r.paths]

    def fraction(es, k):
        return sum(e.prefix(k) for e in es) / sum(e.size for e in es)

    custom, standard = entries(out, res), entries(std_out, std_res)
    assert fraction(custom, 5) < fraction(standard, 5)
    assert sum(e.prefix(5) for e in custom) < sum(e.prefix(5) for e in standard)
    # both begin with the same headers and DC scan
    assert [e.lengths[1] for e in custom] == [e.lengths[1] for e in standard]


def test_gray_and_cmyk_images_keep_the_standard_script(tmp_path):
    files = sample_images()
    # jpegtran itself refuses a colour script for a grayscale image: hence the standard script
    gray = subprocess.run(
        ["jpegtran", "-scans", SCRIPT], input=files["cat/b_gray.jpg"], capture_output=True
    )
    assert gray.returncode != 0 and b"Invalid scan script" in gray.stderr
    root = make_image_folder(str(tmp_path / "f"), files)
    # the Python API also takes the script's text instead of a file
    out, res = convert_local(tmp_path, root, images_per_record=4, scan_script=open(SCRIPT).read())
    assert res.totals["records_written"] == len(files) and res.totals["records_rejected"] == 0
    index = os.path.join(out, fmt.INDEX_NAME)
    maps = {}
    for path in res.paths:
        e = fmt.lookup(fmt.read_index(index)[1], path)
        meta = pcr_pb2.MetadataRecord.FromString(open(path, "rb").read()[: e.lengths[0]])
        maps.update({im.key: (im.scan_map, im.components) for im in meta.images})
    assert maps == {
        "cat/a_colour.jpg": ("identity", 3),
        "cat/b_gray.jpg": ("gray-6", 1),
        "cat/c_cmyk.jpg": ("4comp-18", 4),
        "dog/d_odd.jpg": ("identity", 3),
        "dog/e_png.png": ("identity", 3),
        "dog/f_colour.jpg": ("identity", 3),
    }
    for key, jpeg, _ in pcr_reader.iter_pcr(res.paths, index, 10, with_keys=True):
        if not key.endswith(".png"):
            assert np.array_equal(decode(jpeg), decode(files[key])), key


@pytest.mark.slow
def test_same_bytes_across_worker_counts_and_processes(runs, tmp_path):
    (out, _), _ = runs
    from pipelines.beam.pcr import PcrConfig, convert_pcr

    one = str(tmp_path / "one")
    convert_pcr(
        PcrConfig(sources=DEMO, output=one, images_per_record=20, scans=SCRIPT, progress=False),
        ["--direct_num_workers=1"],
    )
    cli = str(tmp_path / "cli")  # another process: its own temporary copy of the script
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.cli",
            "pcr",
            DEMO,
            "--output",
            cli,
            "--images-per-record",
            "20",
            "--scans",
            SCRIPT,
            "--direct_num_workers=2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, proc.stderr

    def files(d):
        return {
            f: open(os.path.join(d, f), "rb").read()
            for f in sorted(os.listdir(d))
            if f.startswith("PCR_")
        }

    assert files(one) == files(out) == files(cli) and len(files(out)) == 4


BAD = {
    "garbage": (
        b"0 1 2: zero;\n",
        "jpegtran rejects it for 3-component images: Invalid scan entry format in file",
    ),
    "gray-only": (
        b"0: 0 0 0 0;\n0: 1 63 0 0;\n",
        "jpegtran rejects it .*: Scan script does not transmit all data",
    ),
    "sequential": (b"0: 0 63 0 0;\n1: 0 63 0 0;\n2: 0 63 0 0;\n", "it is sequential"),
    "lossy": (
        b"0 1 2: 0 0 0 0;\n0: 1 63 0 0;\n1: 1 63 0 0;\n",
        "it never sends component 2 coefficients 1-63 to full precision",
    ),
    "empty": (b"# nothing\n\n", "it lists no scans"),
    "binary": (b"\xff\xd8\xff\xe0", "not a text file"),
}


@pytest.mark.parametrize("case", sorted(BAD) + ["missing", "directory"])
def test_bad_scripts_are_usage_errors_before_any_work(case, tmp_path, capsys):
    from launch.cli import main

    path = str(tmp_path / f"{case}.txt")
    if case in BAD:
        open(path, "wb").write(BAD[case][0])
        reason = BAD[case][1]
    elif case == "directory":
        os.mkdir(path)
        reason = "cannot read it: IsADirectoryError"
    else:
        reason = "cannot read it: FileNotFoundError"
    out = str(tmp_path / "out")
    assert main(["pcr", DEMO, "--output", out, "--scans", path]) == 2
    err = capsys.readouterr().err
    assert re.search(f"tar2tf pcr: scan script {re.escape(path)}: {reason}", err), err
    assert (
        "tar2tf-scans-" not in err
    )  # jpegtran's words name the user's file, not the worker's copy
    assert not os.path.exists(out) or os.listdir(out) == []  # no work, no records, no rejects


def test_a_file_and_a_different_text_are_refused(tmp_path):
    from pipelines.beam.pcr import PcrConfig, convert_pcr

    cfg = PcrConfig(
        sources=DEMO, output=str(tmp_path / "out"), scans=SCRIPT, scan_script="0 1 2: 0 0 0 0;\n"
    )
    with pytest.raises(ValueError, match="scan_script differs from the text of scans="):
        convert_pcr(cfg, ["--direct_num_workers=1"])
    assert not os.path.exists(cfg.output)


def test_resume_with_another_script_is_refused(tmp_path, monkeypatch, capsys):
    from launch.cli import main
    from pipelines.beam.pcr import PcrConfig, convert_pcr
    from transforms.pcr import convert as pc

    src = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..3}.tar")
    out = str(tmp_path / "out")
    real = pc.convert_unit

    def dies_on_unit_2(unit, *a, **kw):
        if unit[1] == 2:
            raise RuntimeError("killed")
        return real(unit, *a, **kw)

    monkeypatch.setattr(pc, "convert_unit", dies_on_unit_2)
    with pytest.raises(
        Exception, match="killed"
    ):  # in_memory: the DoFns run in this process, patched
        convert_pcr(
            PcrConfig(sources=src, output=out, images_per_record=20, progress=False),
            ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
        )
    monkeypatch.setattr(pc, "convert_unit", real)
    # the interrupted run used the standard script: resuming with another one is refused
    assert (
        main(
            [
                "pcr",
                src,
                "--output",
                out,
                "--images-per-record",
                "20",
                "--resume",
                "--scans",
                SCRIPT,
                "--no-progress",
                "--direct_num_workers=1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--resume: the interrupted run of these inputs" in err
    assert (
        "scan_script: jpegtran's standard script then, script sha256" in err
        and "other options" in err
    )
    # with the interrupted run's options, the same command resumes
    res = convert_pcr(
        PcrConfig(sources=src, output=out, images_per_record=20, progress=False, resume=True),
        ["--direct_num_workers=1"],
    )
    assert res.exit_code == 0 and res.counters["shards_resumed"] >= 1  # the same options resume
