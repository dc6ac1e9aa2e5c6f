"""``tar2tf verify`` on manifests it did not write, or that were damaged on purpose.

* A JSON object no tar2tf job wrote (``{}``, another tool's manifest, a bare
  ``{"kind": "tfrecord", "shards": []}``): "not a tar2tf manifest", exit 2.
* A damaged tar2tf manifest (a JSON list, a non-numeric ``bytes``, a shard path of
  ``/dev/zero``, a frame whose length field says 2^40): each a listed problem, exit 5,
  one report, no traceback; the other shards are still checked.
"""

import json
import os
import struct

import pytest
from support.cli_fixtures import cli, copy_dataset

from pipelines.verify import verify
from transforms.tfrecord.framing import masked_crc32c


def _dataset(demo_output, tmp_path):
    d = copy_dataset(demo_output[0], str(tmp_path / "d"))
    return d, os.path.join(d, "demo.record.manifest.json")


def _no_traceback(p):
    assert "Traceback" not in p.stderr and "Error:" not in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize(
    "content",
    [
        {},
        {"kind": "tfrecord", "shards": []},
        {"tool": "othertool", "version": "1", "files": ["a.tfrecord"]},
        {"tool": "tar2tf", "kind": "parquet", "shards": []},
    ],
)
def test_not_a_tar2tf_manifest_exit_2(tmp_path, content):
    mpath = tmp_path / "x.manifest.json"
    mpath.write_text(json.dumps(content))
    p = cli("verify", str(mpath))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(lines) == 1 and "not a tar2tf manifest" in lines[0], p.stderr
    assert "OK" not in p.stdout


def test_manifest_that_is_a_json_list(tmp_path):
    mpath = tmp_path / "x.manifest.json"
    mpath.write_text("[1, 2]")
    p = cli("verify", str(mpath))
    assert p.returncode == 5, p.stdout + p.stderr
    _no_traceback(p)
    assert "JSON list" in p.stdout


def _problems_by_shard(rep):
    return {(p.check, os.path.basename(p.shard or "manifest")) for p in rep.problems}


def test_damaged_rows_are_problems_and_other_shards_checked(demo_output, tmp_path):
    d, mpath = _dataset(demo_output, tmp_path)
    m = json.load(open(mpath))
    n = len(m["shards"])
    assert n >= 3
    m["shards"][0]["bytes"] = "lots"  # not a number
    m["shards"][1]["path"] = "/dev/zero"  # an endless device
    json.dump(m, open(mpath, "w"))
    p = cli("verify", mpath)
    assert p.returncode == 5, p.stdout + p.stderr
    _no_traceback(p)
    rep = verify(mpath)
    details = " | ".join(p.line() for p in rep.problems)
    assert "shard row 0 bytes is 'lots', not a count" in details
    assert ("file", "zero") in _problems_by_shard(rep), details
    # the rows after them were read and found intact
    assert rep.shards_checked == n - 2
    last = os.path.basename(m["shards"][-1]["path"])
    assert not any(os.path.basename(p.shard or "") == last for p in rep.problems)


def test_huge_frame_length_is_a_problem_not_a_memory_error(demo_output, tmp_path):
    d, mpath = _dataset(demo_output, tmp_path)
    target = os.path.join(d, "demo-2.record")
    data = bytearray(open(target, "rb").read())
    header = struct.pack("<Q", 1 << 40)
    data[0:12] = header + struct.pack("<I", masked_crc32c(header))  # a valid length CRC
    open(target, "wb").write(bytes(data))
    p = cli("verify", mpath)
    assert p.returncode == 5, p.stdout + p.stderr
    _no_traceback(p)
    rep = verify(mpath)
    shards = _problems_by_shard(rep)
    assert ("crc", "demo-2.record") in shards
    assert {s for _, s in shards} == {"demo-2.record"}  # the other shards are fine
    assert rep.shards_checked == len(json.load(open(mpath))["shards"])


def test_file_longer_than_the_manifest_says(demo_output, tmp_path):
    d, mpath = _dataset(demo_output, tmp_path)
    with open(os.path.join(d, "demo-1.record"), "ab") as f:
        f.write(b"\0" * 100)
    rep = verify(mpath)
    assert any(p.check == "size" and "more than" in p.detail for p in rep.problems)


def _with_rejects_at(mpath, path, count):
    m = json.load(open(mpath))
    m["rejects"] = dict(m["rejects"], path=str(path), count=count)
    json.dump(m, open(mpath, "w"))


def test_rejects_path_that_is_a_device(demo_output, tmp_path):
    """A manifest whose rejects file is /dev/zero: a listed ``rejects`` problem, exit 5,
    and every shard is still checked (it used to read the device until memory ran out)."""
    d, mpath = _dataset(demo_output, tmp_path)
    _with_rejects_at(mpath, "/dev/zero", 0)
    p = cli("verify", mpath)
    assert p.returncode == 5, p.stdout + p.stderr
    _no_traceback(p)
    rep = verify(mpath)
    assert [(q.check, q.detail) for q in rep.problems] == [
        (
            "rejects",
            "rejects file /dev/zero cannot be read: "
            "not a regular file (a character device): /dev/zero",
        )
    ]
    assert rep.shards_checked == len(json.load(open(mpath))["shards"])


def test_rejects_file_is_read_no_further_than_its_count(demo_output, tmp_path):
    """A rejects file longer than the manifest's count is read only past that count: a
    64 GiB (sparse) file after 4 lines is a problem found at once, never read whole."""
    d, mpath = _dataset(demo_output, tmp_path)
    big = tmp_path / "big.rejects.jsonl"
    with open(big, "wb") as f:
        f.write(b'{"key": "a"}\n' * 4)
        f.truncate(1 << 36)
    _with_rejects_at(mpath, big, 3)
    rep = verify(mpath)
    assert [(q.check, q.detail) for q in rep.problems] == [
        ("rejects", "rejects file has more than 3 lines, manifest says 3")
    ]
    # fewer lines than the count, blank lines not counted, a last line with no newline
    big.write_bytes(b'{"key": "a"}\n\n  \n{"key": "b"}')
    rep = verify(mpath)
    assert [q.detail for q in rep.problems] == ["rejects file has 2 lines, manifest says 3"]
    big.write_bytes(b'{"key": "a"}\n{"key": "b"}\n{"key": "c"}\n')
    assert verify(mpath).problems == []


def test_huge_frame_length_is_one_reason_in_inspect_and_verify(demo_output, tmp_path):
    """A length field of 2^40: ``inspect`` says in one line what ``verify`` lists (the
    record is truncated: the file holds fewer bytes than the frame claims), no
    ``MemoryError`` from reading the claimed size at once."""
    d, mpath = _dataset(demo_output, tmp_path)
    target = os.path.join(d, "demo-2.record")
    data = bytearray(open(target, "rb").read())
    header = struct.pack("<Q", 1 << 40)
    data[0:12] = header + struct.pack("<I", masked_crc32c(header))
    open(target, "wb").write(bytes(data))
    reason = f"truncated record at offset 0: {len(data) - 12} of {(1 << 40) + 4} bytes"
    p = cli("inspect", target, "--no-sheet")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.splitlines() == [
        f"tar2tf inspect: {target} is not a readable TFRecord file: {reason}"
    ]
    crc = [q.detail for q in verify(mpath).problems if q.check == "crc"]
    assert crc == [f"{reason} (after 0 good records)"]
