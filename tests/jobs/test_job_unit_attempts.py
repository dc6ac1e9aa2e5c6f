"""Two attempts of one unit, as a runner makes them (a retried bundle, a backup task):
each writes its own work files, and the job's output is the committed summary's, whichever
attempt finished last -- also when they run at the same time.  One attempt sees a
transient fetch failure, so the two differ."""

from __future__ import annotations

import os
import threading

import pytest
from support.pcr_fixtures import requires_jpegtran

from pipelines.job import lifecycle
from pipelines.job.kinds.pcr import kind as pcr_kind
from pipelines.job.kinds.tfrecord import piece as piece_mod
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.kind import TFRECORD
from pipelines.verify.check import verify
from transforms.record_types import Reject
from transforms.tfrecord.framing import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = [os.path.join(ROOT, "launch", "demo", "shards", f"demo-{i}.tar") for i in (0, 1)]
CUT_AFTER = 5  # records the failing attempt reads before its fetch fails


def _failing_reader(real, gate=None):
    """``read_shard`` as an attempt sees it when the connection drops after a few records:
    a ``fetch`` reject, and the records before it."""

    def read(url, *args, **kwargs):
        for n, item in enumerate(real(url, *args, **kwargs)):
            if n == CUT_AFTER:
                if gate is not None:
                    gate.wait(timeout=30)  # the other attempt is now writing too
                yield Reject(url, None, "fetch", "fetch failed: connection reset")
                return
            yield item

    return read


def _records(manifest):
    return [r for row in manifest["shards"] for r in read_records(row["path"])]


def _run(tmp_path, name, attempts):
    """A job of two input shards whose first is converted by ``attempts(convert)``, which
    returns the summary the runner commits; the rest of the job runs as a driver runs it."""
    cfg = ConvertConfig(
        sources=DEMO,
        output=str(tmp_path / name / "t-{}.record"),
        max_shard_size="150KB",
        progress=False,
    )
    job = lifecycle.prepare(TFRECORD, cfg)
    lifecycle.start(job)
    stages = TFRECORD.stages(job.cfg)

    def convert(unit):
        return lifecycle.convert_unit(TFRECORD, job.cfg, job.work, unit, stages)[0]

    first = attempts(lambda: convert(job.units[0]))
    summaries = [first] + [convert(u) for u in job.units[1:]]
    rows = [TFRECORD.write(t, job.cfg) for t in TFRECORD.plan(summaries, job.cfg)]
    manifest = lifecycle.finish(job, rows, summaries)
    lifecycle.result_of(job, {}, manifest)
    report = verify(TFRECORD.manifest_path(cfg))
    assert report.ok, report.problems
    return first, manifest


@pytest.fixture
def clean(tmp_path):
    return _run(tmp_path, "clean", lambda convert: convert())


def _with_failure(monkeypatch, gate=None):
    real = piece_mod.read_shard
    monkeypatch.setattr(piece_mod, "read_shard", _failing_reader(real, gate))
    return lambda: monkeypatch.setattr(piece_mod, "read_shard", real)


@pytest.mark.parametrize("order", ["good-then-failed", "failed-then-good"])
@pytest.mark.parametrize("committed", ["good", "failed"])
def test_the_output_is_the_committed_attempts_in_either_order(
    tmp_path, monkeypatch, clean, order, committed
):
    _, clean_manifest = clean

    def attempts(convert):
        got = {}
        for which in order.split("-then-"):
            if which == "failed":
                restore = _with_failure(monkeypatch)
                got[which] = convert()
                restore()
            else:
                got[which] = convert()
        return got[committed]

    first, manifest = _run(tmp_path, "job", attempts)
    records = _records(manifest)
    if committed == "good":
        assert records == _records(clean_manifest)
        assert manifest["totals"] == clean_manifest["totals"]
    else:
        assert first.records == CUT_AFTER and first.records_rejected + first.shards_rejected
        assert len(records) == len(_records(clean_manifest)) - clean[0].records + CUT_AFTER
        assert manifest["rejects"]["by_reason"] and manifest["rejects"]["count"] >= 1
    assert manifest["totals"]["records_written"] == len(records)


@pytest.mark.parametrize("committed", [0, 1])
def test_attempts_that_run_at_once_never_mix(tmp_path, monkeypatch, clean, committed):
    """Both attempts write while the other is writing; either one's summary is committed."""
    _, clean_manifest = clean
    gate = threading.Barrier(2)
    real = piece_mod.read_shard
    failing = _failing_reader(real, gate)
    mine = threading.local()

    def read(url, *args, **kwargs):
        if getattr(mine, "fails", False):
            return failing(url, *args, **kwargs)

        def good():
            for n, item in enumerate(real(url, *args, **kwargs)):
                if n == CUT_AFTER:
                    gate.wait(timeout=30)
                yield item

        return good()

    monkeypatch.setattr(piece_mod, "read_shard", read)

    def attempts(convert):
        got = [None, None]

        def attempt(i):
            mine.fails = i == 1
            got[i] = convert()

        threads = [threading.Thread(target=attempt, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert None not in got
        monkeypatch.setattr(piece_mod, "read_shard", real)
        return got[committed]

    first, manifest = _run(tmp_path, "job", attempts)
    records = _records(manifest)
    if committed == 0:
        assert records == _records(clean_manifest)
    else:
        assert first.records == CUT_AFTER
        assert len(records) == len(_records(clean_manifest)) - clean[0].records + CUT_AFTER


def test_each_attempt_writes_files_of_its_own_and_the_sidecar_names_the_last(tmp_path):
    cfg = ConvertConfig(sources=DEMO[:1], output=str(tmp_path / "o" / "t.record"), progress=False)
    work = str(tmp_path / "w")
    stages = cfg.stages()
    a = lifecycle.convert_unit(TFRECORD, cfg, work, (0, DEMO[0]), stages)[0]
    b = lifecycle.convert_unit(TFRECORD, cfg, work, (0, DEMO[0]), stages)[0]
    assert a.piece != b.piece and os.path.exists(a.piece) and os.path.exists(b.piece)
    assert sorted(os.listdir(work)) == sorted(
        [os.path.basename(p) for p in (a.piece, b.piece)]
        + [os.path.basename(p)[: -len(".tfrecord")] + ".recs" for p in (a.piece, b.piece)]
        + ["piece-000000.json"]
    )
    # a resume reuses the attempt the sidecar names: the last to finish
    again = piece_mod.load_verified_piece(0, work, cfg.store)
    assert again == b


@requires_jpegtran
def test_pcr_attempts_keep_their_own_descriptions(tmp_path):
    """A PCR unit's plan reads the description of the attempt whose summary it holds, not
    the unit's sidecar (which the other attempt may have written since)."""
    from pipelines.job.kinds.pcr import records as pcr_records

    cfg = pcr_kind.PcrConfig(sources=DEMO[:1], output=str(tmp_path / "p"), progress=False)
    units, _, inputs, _ = pcr_kind.list_units(cfg)
    work = str(tmp_path / "w")
    a = lifecycle.convert_unit(pcr_kind.PCR, cfg, work, units[0], None)[0]
    b = lifecycle.convert_unit(pcr_kind.PCR, cfg, work, units[0], None)[0]
    assert a["blob"] != b["blob"]
    for s in (a, b):
        assert pcr_records._unit_info(s, cfg)["blob"] == s["blob"]


@pytest.mark.parametrize("committed", ["good", "failed"])
def test_the_beam_graph_writes_the_committed_attempts_output(
    tmp_path, monkeypatch, clean, committed
):
    """The same on Beam's runner: its ConvertShard step runs each unit's conversion twice
    (as a retried bundle or a backup task would), the first input shard's two attempts
    differing, and commits one; the graph's plan, writes and manifest read only that
    attempt's files (beside the other's, in the same work directory)."""
    from pipelines.beam.convert import convert
    from pipelines.job.kinds.tfrecord.kind import TFRecordKind

    _, clean_manifest = clean
    real_convert = TFRecordKind.convert
    real_read = piece_mod.read_shard
    failing = _failing_reader(real_read)
    mine = threading.local()

    def read(url, *args, **kwargs):
        reader = failing if getattr(mine, "fails", False) else real_read
        return reader(url, *args, **kwargs)

    def twice(self, cfg, work, unit, stages, hold=0):
        got = {}
        for which in ("good", "failed"):
            mine.fails = which == "failed" and unit[0] == 0
            try:
                got[which] = real_convert(self, cfg, work, unit, stages, hold)
            finally:
                mine.fails = False
        return got[committed]

    monkeypatch.setattr(piece_mod, "read_shard", read)
    monkeypatch.setattr(TFRecordKind, "convert", twice)
    cfg = ConvertConfig(
        sources=DEMO,
        output=str(tmp_path / "beam" / "t-{}.record"),
        max_shard_size="150KB",
        progress=False,
    )
    # in this process (threads), where the patches apply
    res = convert(cfg, ["--direct_num_workers=2", "--direct_running_mode=multi_threading"])
    records = _records(res.manifest)
    if committed == "good":
        assert records == _records(clean_manifest)
    else:
        assert len(records) == len(_records(clean_manifest)) - clean[0].records + CUT_AFTER
    assert verify(TFRECORD.manifest_path(cfg)).ok
