"""Tar grouping: the WebDataset key rule and the compat golden shards (bad input:
test_tar_damage.py)."""

import os
import shutil
import subprocess
import tarfile

import pytest
from support import shardgen

from transforms.record_types import Reject
from transforms.tar.grouping import TarStats, iter_records, split_key

TRICKY = [
    "n01/img7.jpg",
    "n01/img7.cls",
    "n01/a.seg.png",
    "n01/a.seg.PNG.json",
    "dir.with.dots/x.JPG",
    "dir.with.dots/x.cls",
    "UPPER/Case.JPEG",
    "UPPER/Case.Txt",
    "deep/" + "d" * 120 + "/" + "long_name_" * 12 + ".tar.gz",
    "deep/" + "d" * 120 + "/" + "long_name_" * 12 + ".cls",
]


def _records(path, **kw):
    with open(path, "rb") as f:
        return list(iter_records(f, path, **kw))


def _tricky_members():
    return [(n, f"payload of {n}".encode()) for n in TRICKY]


@pytest.mark.parametrize(
    "name,expected",
    [
        ("n01/img7.jpg", ("n01/img7", "jpg")),
        ("n01/a.seg.png", ("n01/a.seg", None)),
        ("a.tar.gz", ("a", "tar.gz")),
        ("x/y/Z.JPG", ("x/y/Z", "jpg")),
        ("noext", None),
        (".hidden", None),
    ],
)
def test_split_key(name, expected):
    got = split_key(name)
    if expected is None:
        assert got is None
    elif expected[1] is None:
        assert got == ("n01/a", "seg.png")
    else:
        assert got == expected


def _wds_samples(path):
    from webdataset.tariterators import group_by_keys, tar_file_expander, url_opener

    out = []
    for s in group_by_keys(tar_file_expander(url_opener([{"url": path}]))):
        out.append(
            {k: v for k, v in s.items() if not k.startswith("__")} | {"__key__": s["__key__"]}
        )
    return out


def _ours(path):
    return [{k: v for k, v in r.items() if k != "__shard__"} for r in _records(path)]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_grouping_matches_webdataset_python_tar(tmp_path, fmt):
    members = _tricky_members()
    if fmt == tarfile.USTAR_FORMAT:
        members = [m for m in members if len(m[0]) < 100]
    p = shardgen.write_tar(str(tmp_path / "t.tar"), members, fmt=fmt)
    ours = _ours(p)
    assert ours == _wds_samples(p)
    keys = [r["__key__"] for r in ours]
    assert "n01/a" in keys and "dir.with.dots/x" in keys and "UPPER/Case" in keys
    if fmt != tarfile.USTAR_FORMAT:
        assert any(len(k) > 200 for k in keys), "long (pax/GNU) names keep their full key"


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar not installed")
def test_grouping_matches_webdataset_gnu_tar(tmp_path):
    src = tmp_path / "src"
    for name, data in _tricky_members():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    p = str(tmp_path / "gnu.tar")
    # GNU tar writes directory entries too, and sorts names: both must be handled
    subprocess.run(
        ["tar", "--sort=name", "--format=gnu", "-cf", p, "-C", str(src), "."], check=True
    )
    stats = TarStats()
    with open(p, "rb") as f:
        ours = [
            {k: v for k, v in r.items() if k != "__shard__"}
            for r in iter_records(f, p, stats=stats)
        ]
    assert ours == _wds_samples(p)
    assert stats.skipped_members >= 4  # ./ and the directories
    assert sum(len(r) - 1 for r in ours) == len(TRICKY)


def test_compat_golden_shards(compat_dir):
    expect = {
        "small-10.tar": 10,
        "small-10.tar.gz": 10,
        "small-mnist-21.tar": 21,
        "ais-small-mnist-3.tar": 3,
    }
    for name, n in expect.items():
        path = os.path.join(compat_dir, name)
        recs = _records(path)
        assert not [r for r in recs if isinstance(r, Reject)]
        assert len(recs) == n
        # the bytes are the members' bytes, as tarfile extracts them
        opener = tarfile.open(path)
        by_name = {m.name: opener.extractfile(m).read() for m in opener.getmembers() if m.isreg()}
        for r in recs:
            for ext, data in r.items():
                if not ext.startswith("__"):
                    assert by_name[f"{r['__key__']}.{ext}"] == data
    gz = _records(os.path.join(compat_dir, "small-10.tar.gz"))
    plain = _records(os.path.join(compat_dir, "small-10.tar"))
    # same records (the two archives list members in different orders)
    key = lambda r: r["__key__"]
    assert [dict(r, __shard__="") for r in sorted(gz, key=key)] == [
        dict(r, __shard__="") for r in sorted(plain, key=key)
    ]


def test_strict_window_is_webdataset_rule(compat_dir):
    """group_window=1 is WebDataset's rule: interleaved members become duplicates."""
    path = os.path.join(compat_dir, "small-10.tar.gz")
    with open(path, "rb") as f:
        strict = list(iter_records(f, path, group_window=1))
    dups = [r for r in strict if isinstance(r, Reject)]
    assert dups and all(r.reason.startswith("duplicate key") for r in dups)
    good = [r for r in strict if not isinstance(r, Reject)]
    assert len(good) + len(dups) > 10
