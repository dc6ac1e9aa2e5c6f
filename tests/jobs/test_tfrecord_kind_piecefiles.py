"""The pieces' record files (``pipelines.job.kinds.tfrecord.piecefiles``): what the job's end reads
instead of sizes and keys carried in memory.  They survive a failed run, a resumed run
reads them (also of pieces whose shards the journal kept), and ``--resume`` trusts a
piece only when its record file matches its sidecar."""

import glob
import os
import shutil

import pytest
from support import shardgen

from pipelines.inprocess.driver import convert_in_process
from pipelines.job import workfiles
from pipelines.job.kinds.tfrecord import kind as cv
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.lifecycle import work_dir_for

N = 5


def _inputs(tmp_path):
    d = str(tmp_path / "in")
    shardgen.make_shards(d, N, 6, size=(32, 32))
    # the last shard holds the first one's keys: the job's end reports them as duplicates
    shutil.copy(os.path.join(d, "train-0000.tar"), os.path.join(d, f"train-{N - 1:04d}.tar"))
    return [os.path.join(d, f"train-{i:04d}.tar") for i in range(N)]


def _cfg(tmp_path, out, output="t-{}.record", **kw):
    return ConvertConfig(
        sources=str(tmp_path / "in" / f"train-{{0000..{N - 1:04d}}}.tar"),
        output=str(tmp_path / out / output),
        max_shard_size="4KB",
        progress=False,
        processes=0,
        **kw,
    )


def _files(d):
    return {
        f: open(os.path.join(d, f), "rb").read()
        for f in sorted(os.listdir(d))
        if not f.startswith(".") and not f.endswith((".manifest.json", ".rejects.jsonl"))
    }


def _fail_at(monkeypatch, index):
    real = cv.convert_to_piece

    def dies(i, *a):
        if i == index:
            raise RuntimeError("killed")
        return real(i, *a)

    monkeypatch.setattr(cv, "convert_to_piece", dies)
    return real


@pytest.mark.parametrize("output", ["t-{}.record", "t.record"])  # streamed, planned
def test_record_files_survive_a_failed_run_and_its_resume_reports_the_same(
    tmp_path, monkeypatch, output
):
    urls = _inputs(tmp_path)
    clean = convert_in_process(_cfg(tmp_path, "clean", output), num_workers=1)
    assert clean.manifest["duplicate_keys"]["count"] == 6

    cfg = _cfg(tmp_path, "o", output)
    real = _fail_at(monkeypatch, N - 1)
    with pytest.raises(RuntimeError, match="killed"):
        convert_in_process(cfg, num_workers=1)
    monkeypatch.setattr(cv, "convert_to_piece", real)
    work = work_dir_for(cfg, urls)
    # every converted piece's record file is kept: also those the in-process driver held
    # in memory (no piece file, no sidecar) and those whose journaled shards hold them
    kept = sorted(
        os.path.basename(workfiles.unit_stem(p))
        for p in glob.glob(os.path.join(work, "*" + piecefiles.SUFFIX))
    )
    assert kept == [f"piece-{i:06d}" for i in range(N - 1)]

    again = convert_in_process(_cfg(tmp_path, "o", output, resume=True), num_workers=1)
    assert again.manifest["duplicate_keys"] == clean.manifest["duplicate_keys"]
    assert again.manifest["totals"] == clean.manifest["totals"]
    assert _files(tmp_path / "o") == _files(tmp_path / "clean")
    assert not os.path.exists(work)


def test_resume_redoes_a_piece_whose_record_file_is_damaged(tmp_path, monkeypatch):
    urls = _inputs(tmp_path)
    cfg = _cfg(tmp_path, "o", "t.record")  # planned: every piece has its file and sidecar
    real = _fail_at(monkeypatch, N - 1)
    with pytest.raises(RuntimeError, match="killed"):
        convert_in_process(cfg, num_workers=1)
    work = work_dir_for(cfg, urls)
    (damaged,) = glob.glob(os.path.join(work, "piece-000001~*" + piecefiles.SUFFIX))
    with open(damaged, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff")
    converted = []
    monkeypatch.setattr(cv, "convert_to_piece", lambda *a: (converted.append(a[0]), real(*a))[1])
    res = convert_in_process(_cfg(tmp_path, "o", "t.record", resume=True), num_workers=1)
    assert converted == [1, N - 1]  # 0, 2, 3 verified and reused
    assert res.counters["shards_resumed"] == N - 2
    assert res.manifest["duplicate_keys"]["count"] == 6


def test_beams_duplicate_scan_over_the_workers_reports_what_one_worker_finds(tmp_path):
    """The Beam graph groups the key hashes by bucket across its workers
    (``pipelines.beam.duplicates``); the in-process driver scans them on one: the same
    count and examples."""
    from pipelines.beam.convert import convert

    _inputs(tmp_path)
    local = convert_in_process(_cfg(tmp_path, "local"), num_workers=1)
    beam = convert(_cfg(tmp_path, "beam"), ["--direct_num_workers=2"])
    assert local.manifest["duplicate_keys"]["count"] == 6
    assert beam.manifest["duplicate_keys"] == local.manifest["duplicate_keys"]
