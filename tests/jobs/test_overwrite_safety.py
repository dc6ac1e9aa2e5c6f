"""``--overwrite`` never destroys inputs, and replaces an output manifest-first.

* Any path a job may write or delete (output shards under any count, DALI indexes,
  manifest, rejects file, work directory; a PCR directory's records and index) that is, or
  lies inside, an input is refused before anything is written: exit 2, one line, the
  inputs byte-identical (pipelines/job/overlap.py).
* Stale-shard clean-up deletes only files an earlier manifest named as its outputs.
* A kill (SIGKILL) at any point of an overwrite leaves either no manifest, or a manifest
  that describes exactly the shards on disk (pipelines/job/replace.py); a rerun finishes it.
"""

import glob
import hashlib
import json
import os
import shutil
import subprocess

import pytest
from support import background, shardgen
from support.cli_fixtures import cli, output_digest

from transforms.tfrecord import digests


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _tree(d) -> dict:
    """Every file under ``d`` (relative path -> sha256)."""
    out = {}
    for dirpath, _, files in os.walk(d):
        for fn in files:
            p = os.path.join(dirpath, fn)
            out[os.path.relpath(p, d)] = _sha(p)
    return out


def _one_line_error(p, code=2) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == code, p.stderr
    assert len(lines) == 1 and lines[0].startswith("tar2tf "), p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def named_inputs(tmp_path_factory):
    """Three valid shards named data-1.tar .. data-3.tar (and a copy as data-5/6)."""
    d = tmp_path_factory.mktemp("named")
    shardgen.make_shards(str(d / "gen"), 3, 3, size=(8, 8))
    for i in range(3):
        shutil.copy(d / "gen" / f"train-{i:04d}.tar", d / f"data-{i + 1}.tar")
    return d


def _fresh(named_inputs, tmp_path) -> str:
    d = tmp_path / "in"
    d.mkdir()
    for fn in ("data-1.tar", "data-2.tar", "data-3.tar"):
        shutil.copy(named_inputs / fn, d / fn)
    return str(d)


@pytest.mark.parametrize(
    "output, extra",
    [
        ("data-{}.tar", []),  # the issue's case: shard 1 replaced, 2 and 3 "stale"
        ("data-{}.tar", ["--dali-index"]),
        ("data-{}.tar", ["--records-per-shard", "1"]),
        ("data.tar", []),  # data-00000-of-00001.tar: no input has that name...
    ],
    ids=["braces", "braces-dali", "braces-9-shards", "plain"],
)
def test_overwrite_output_named_like_the_inputs_is_refused(named_inputs, tmp_path, output, extra):
    d = _fresh(named_inputs, tmp_path)
    if output == "data.tar":  # ...unless one does: an input named like a planned shard
        os.rename(os.path.join(d, "data-3.tar"), os.path.join(d, "data-00000-of-00001.tar"))
        sources = [os.path.join(d, "data-{1..2}.tar"), os.path.join(d, "data-00000-of-00001.tar")]
    else:
        sources = [os.path.join(d, "data-{1..3}.tar")]
    before = _tree(d)
    p = cli(
        "convert",
        *sources,
        "--output",
        os.path.join(d, output),
        "--overwrite",
        "--no-progress",
        *extra,
    )
    line = _one_line_error(p)
    assert "would overwrite or delete the input" in line, line
    assert _tree(d) == before  # nothing written, nothing deleted, not even a work directory


def test_inputs_a_stale_cleanup_would_delete_are_refused(named_inputs, tmp_path):
    """Inputs data-5/6.tar, output data-{}.tar: the job's one shard is data-1.tar, but the
    clean-up of "stale" shards of the same template would delete the inputs."""
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(named_inputs / "data-1.tar", d / "data-5.tar")
    shutil.copy(named_inputs / "data-2.tar", d / "data-6.tar")
    before = _tree(d)
    p = cli(
        "convert",
        str(d / "data-{5..6}.tar"),
        "--output",
        str(d / "data-{}.tar"),
        "--overwrite",
        "--no-progress",
    )
    assert "would overwrite or delete the input" in _one_line_error(p)
    assert _tree(d) == before


@pytest.mark.parametrize(
    "companion", ["out.tar.manifest.json", "out.tar.rejects.jsonl", "out-1.tar.idx"]
)
def test_an_input_named_like_a_companion_file_is_refused(named_inputs, tmp_path, companion):
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(named_inputs / "data-1.tar", d / companion)
    before = _tree(d)
    p = cli(
        "convert",
        str(d / companion),
        "--output",
        str(d / "out-{}.tar"),
        "--dali-index",
        "--overwrite",
        "--no-progress",
    )
    assert "would overwrite or delete the input" in _one_line_error(p)
    assert _tree(d) == before


def test_an_input_reached_through_a_symlinked_output_directory_is_refused(named_inputs, tmp_path):
    d = _fresh(named_inputs, tmp_path)
    os.symlink(d, tmp_path / "link")
    before = _tree(d)
    p = cli(
        "convert",
        os.path.join(d, "data-{1..3}.tar"),
        "--output",
        str(tmp_path / "link" / "data-{}.tar"),
        "--overwrite",
        "--no-progress",
    )
    assert "would overwrite or delete the input" in _one_line_error(p)
    assert _tree(d) == before


def test_stale_cleanup_deletes_only_what_the_earlier_manifest_named(named_inputs, tmp_path):
    d = _fresh(named_inputs, tmp_path)
    out = tmp_path / "o"
    args = [
        "convert",
        os.path.join(d, "data-{1..3}.tar"),
        "--output",
        str(out / "t-{}.record"),
        "--no-progress",
    ]
    p = cli(*args, "--records-per-shard", "2")
    assert p.returncode == 0, p.stderr
    first = json.loads((out / "t.record.manifest.json").read_text())
    assert len(first["shards"]) == 5
    (out / "t-9.record").write_bytes(b"someone else's file under the output's names")
    p = cli(*args, "--records-per-shard", "4", "--overwrite")
    assert p.returncode == 0, p.stderr
    assert "left in place" in p.stderr, p.stderr  # said, not silently deleted
    assert (out / "t-9.record").read_bytes() == b"someone else's file under the output's names"
    left = sorted(os.path.basename(f) for f in glob.glob(str(out / "t-*.record")))
    assert left == ["t-1.record", "t-2.record", "t-3.record", "t-9.record"]
    assert not glob.glob(str(out / "*.replacing.json"))


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("folder") / "images"
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8), (40 * i, 80, 120)).save(root / c / f"{i}.jpg", quality=90)
    return root


@pytest.mark.parametrize("where", ["root", "inside-root", "inside-class"])
def test_pcr_output_in_the_image_folder_is_refused(image_folder, tmp_path, where):
    root = tmp_path / "images"
    shutil.copytree(image_folder, root)
    out = {"root": root, "inside-root": root / "pcr", "inside-class": root / "cat" / "pcr"}[where]
    before = _tree(root)
    p = cli("pcr", str(root), "--output", str(out), "--overwrite", "--no-progress")
    assert "would overwrite or delete the input" in _one_line_error(p)
    assert _tree(root) == before


def test_pcr_tar_inputs_named_like_its_records_are_refused(named_inputs, tmp_path):
    from PIL import Image

    d = tmp_path / "o"
    d.mkdir()
    src = tmp_path / "src"
    for i in range(2):
        (src / str(i)).mkdir(parents=True)
        Image.new("RGB", (8, 8), (i, 2, 3)).save(src / str(i) / "a.jpg")
        (src / str(i) / "a.cls").write_text(str(i))
        subprocess.run(
            ["tar", "-C", str(src / str(i)), "-cf", str(d / f"PCR_{i}.db"), "a.jpg", "a.cls"],
            check=True,
        )
    before = _tree(d)
    p = cli(
        "pcr",
        str(d / "PCR_{0..1}.db"),
        "--input-format",
        "tar",
        "--output",
        str(d),
        "--overwrite",
        "--no-progress",
    )
    assert "would overwrite or delete the input" in _one_line_error(p)
    assert _tree(d) == before


# -- kills during an overwrite -------------------------------------------------------------

N_IN, PER_IN = 6, 4


def _invariant(out) -> str:
    """'none' (no manifest) or 'exact' (a manifest whose shards are exactly the files under
    the output's names, each with its size and CRC-32C); fails otherwise."""
    mpath = os.path.join(out, "t.record.manifest.json")
    on_disk = sorted(glob.glob(os.path.join(out, "t-*.record")))
    if not os.path.exists(mpath):
        return "none"
    m = json.loads(open(mpath).read())
    assert sorted(s["path"] for s in m["shards"]) == on_disk, (
        "the manifest does not list the shards on disk"
    )
    for s in m["shards"]:
        assert os.path.getsize(s["path"]) == s["bytes"], f"{s['path']} is not the manifest's"
        crc = digests.new("crc32c")
        with open(s["path"], "rb") as f:
            crc.update(f.read())
        assert digests.hexdigest(crc) == s["crc32c"], f"{s['path']} is not the manifest's"
    return "exact"


def _inodes(out):
    return {p: os.stat(p).st_ino for p in glob.glob(os.path.join(out, "t-*.record"))}


@pytest.mark.parametrize("point", ["manifest-removed", "shard-1", "shard-3"])
@pytest.mark.slow
def test_kill_during_overwrite_leaves_no_stale_manifest(tmp_path, point):
    shardgen.make_shards(str(tmp_path / "in"), N_IN, PER_IN, size=(16, 12))
    src = str(tmp_path / "in" / "train-{0000..0005}.tar")
    out = str(tmp_path / "o")
    env = background.slow_env("0.15")
    base = [
        "convert",
        src,
        "--output",
        os.path.join(out, "t-{}.record"),
        "--type-map",
        "cls:int64",
        "--ops",
        "support.slow_ops:slow_ops",
        "--no-progress",
        "--direct_num_workers=2",
    ]
    p = cli(*base, "--records-per-shard", "2", env={**env, "TAR2TF_TEST_DELAY": "0"})
    assert p.returncode == 0, p.stderr
    assert _invariant(out) == "exact"
    old = _inodes(out)
    assert len(old) == N_IN * PER_IN // 2
    mpath = os.path.join(out, "t.record.manifest.json")
    args = base + ["--records-per-shard", "3", "--overwrite"]
    proc = background.start(*args, env=env, session=True)

    def reached() -> bool:
        if point == "manifest-removed":
            return not os.path.exists(mpath)
        k = int(point.split("-")[1])
        name = os.path.join(out, f"t-{k}.record")
        try:
            return os.stat(name).st_ino != old[name]
        except FileNotFoundError:
            return False

    background.wait_until(proc, reached, f"the kill point {point}", poll=0.005)
    background.kill(proc)
    if point != "manifest-removed":  # a new shard is on disk: the old manifest must be gone
        assert _invariant(out) == "none"
    else:
        _invariant(out)
    # a rerun finishes the replacement: the bytes of a clean run, and nothing else left
    p = cli(*args, env={**env, "TAR2TF_TEST_DELAY": "0"})
    assert p.returncode == 0, p.stderr
    assert _invariant(out) == "exact"
    p = cli(*[a.replace(out, out + "-ref") for a in args], env={**env, "TAR2TF_TEST_DELAY": "0"})
    assert p.returncode == 0, p.stderr
    assert output_digest(out) == output_digest(out + "-ref")
