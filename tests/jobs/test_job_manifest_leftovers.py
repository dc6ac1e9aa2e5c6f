"""A full disk at the manifest step leaves no ``.manifest.json.tmp-...`` behind, and a
later ``--resume`` removes such leftovers (of a killed job, or of an older version)."""

import dataclasses
import errno
import glob
import io
import os

import pytest
from support import shardgen

from pipelines.inprocess.driver import convert_in_process
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.stores import registry


class _FullDisk(io.RawIOBase):
    """A file on a disk with no space left: created, but every write fails."""

    def __init__(self, path):
        self._f = open(path, "wb", buffering=0)

    def writable(self):
        return True

    def write(self, b):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._f.name)

    def fileno(self):
        return self._f.fileno()

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


def _leftovers(d):
    return sorted(glob.glob(os.path.join(d, ".*.tmp-*")))


@pytest.fixture()
def job(tmp_path):
    shardgen.make_shards(str(tmp_path / "in"), 2, 3, size=(8, 8))
    out = tmp_path / "o"
    cfg = ConvertConfig(
        sources=str(tmp_path / "in" / "train-{0000..0001}.tar"),
        output=str(out / "t-{}.record"),
        progress=False,
        type_map={"cls": "int64"},
    )
    return cfg, str(out)


def test_full_disk_at_the_manifest_leaves_no_temporary(job, monkeypatch):
    cfg, out = job
    real_open = open

    def full_for_the_manifest(path, mode="r", *a, **kw):
        if "manifest.json.tmp-" in str(path) and "w" in mode:
            return io.BufferedWriter(_FullDisk(path), kw.get("buffering", 1 << 20))
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr(registry, "open", full_for_the_manifest, raising=False)
    with pytest.raises(OSError) as e:
        convert_in_process(cfg)
    assert e.value.errno == errno.ENOSPC
    assert _leftovers(out) == []
    assert not os.path.exists(os.path.join(out, "t.record.manifest.json"))
    monkeypatch.undo()
    res = convert_in_process(dataclasses.replace(cfg, resume=True))
    assert res.exit_code == 0 and _leftovers(out) == []


def test_resume_removes_leftover_manifest_temporaries(job):
    cfg, out = job
    os.makedirs(out)
    stale = [
        os.path.join(out, ".t.record.manifest.json.tmp-0123456789ab"),
        os.path.join(out, ".t.record.rejects.jsonl.tmp-ba9876543210"),
    ]
    for p in stale:
        open(p, "wb").close()
    other = os.path.join(out, ".other.manifest.json.tmp-0123456789ab")  # another output's
    open(other, "wb").close()
    res = convert_in_process(cfg)
    assert res.exit_code == 0
    assert _leftovers(out) == [other]
