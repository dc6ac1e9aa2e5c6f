"""The job lifecycle's parts that no whole job shows on its own: a refusal worded by its
caller, and the PCR kind's global steps, which see per-unit summaries and stream each
image's description from the units' sidecars."""

import collections
import functools
import json
import os
import pickle

import pytest
from support.pcr_fixtures import requires_jpegtran

from launch.args import CLI_WORDS
from pipelines.job.output_lock import OutputLockedError
from pipelines.job.refused import OVERWRITE, RESUME, OutputExistsError, Refusal, ResumeConflict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..3}.tar")


def test_a_refusal_names_the_options_as_its_caller_spells_them():
    e = OutputExistsError(
        "3 output file(s) already match o-{}.record; pass ", OVERWRITE, " to replace"
    )
    assert isinstance(e, Refusal) and isinstance(e, RuntimeError)
    assert str(e) == "3 output file(s) already match o-{}.record; pass overwrite=True to replace"
    assert str(e.worded(CLI_WORDS)) == (
        "3 output file(s) already match o-{}.record; pass --overwrite to replace"
    )
    assert e.args == (str(e),)  # what a traceback and pickling show
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is OutputExistsError and str(again) == str(e)
    # the lock's refusal is one case of the same class, caught as it
    locked = OutputLockedError("another job is writing o-{}.record")
    assert isinstance(locked, OutputExistsError) and str(locked.worded(CLI_WORDS)) == str(locked)
    c = ResumeConflict(RESUME, ": other options; or without ", RESUME, " to start afresh")
    assert isinstance(c, ValueError)
    assert str(c) == "resume=True: other options; or without resume=True to start afresh"


def _old_plan(infos, cfg):
    """The plan as it was when every unit's info crossed the job with its images."""
    from pipelines.job.kinds.tfrecord.piecefiles import sort_key
    from transforms.pcr import format as fmt
    from transforms.stores import join

    flat = []
    for info in sorted(infos, key=lambda i: i["index"]):
        for im in info["images"]:
            flat.append(dict(im, blob=info["blob"], unit=info["index"]))
    if cfg.seed is not None:
        flat.sort(key=lambda im: sort_key(cfg.seed, im["unit"], im["key"]))
    n = cfg.images_per_record
    return [
        {"index": r, "path": join(cfg.output, fmt.record_name(r)), "images": flat[a : a + n]}
        for r, a in enumerate(range(0, len(flat), n))
    ]


@requires_jpegtran
@pytest.mark.parametrize("seed", [None, 3])
def test_pcr_plan_from_summaries_equals_the_plan_over_every_image(tmp_path, seed, monkeypatch):
    from pipelines.job import external, lifecycle, workfiles
    from pipelines.job.kinds.pcr import kind
    from pipelines.job.kinds.pcr import records as pcr_records
    from pipelines.job.lifecycle import work_dir_for
    from transforms.pcr import convert as pc

    cfg = kind.PcrConfig(
        sources=DEMO, output=str(tmp_path / "o"), images_per_record=7, seed=seed, progress=False
    )
    units, _, inputs, _ = kind.list_units(cfg)
    work = work_dir_for(cfg, inputs)
    summaries = [lifecycle.convert_unit(kind.PCR, cfg, work, u, None) for u in units]
    assert [reused for _, reused in summaries] == [False] * len(units)
    summaries = [s for s, _ in summaries]
    infos = [
        workfiles.load_verified(workfiles.unit_stem(pc.unit_blob(work, u)), "blob", cfg.store)
        for u in units
    ]
    # what crosses the job: counts, no image and no reject
    for s, info in zip(summaries, infos):
        assert "images" not in s and "rejects" not in s and "sizes" not in s
        assert s["records"] == len(info["images"]) > 0
    # buckets of 5 rows: the seeded order is sorted through bucket files, as at scale
    monkeypatch.setattr(external, "buckets", functools.partial(external.buckets, per_bucket=5))
    reads = collections.Counter()
    unit_info = pcr_records._unit_info

    def counted(unit, cfg):
        reads[unit["index"]] += 1
        return unit_info(unit, cfg)

    monkeypatch.setattr(pcr_records, "_unit_info", counted)
    got = [dict(t) for t in pcr_records.plan_records(summaries, cfg)]
    assert got == _old_plan(infos, cfg)
    assert len(got) > 2 and len(got[-1]["images"]) <= 7
    # each unit's sidecar is read once, however its images are spread over the records
    assert reads == {s["index"]: 1 for s in summaries if s["records"]}


def test_kept_work_is_said_by_the_cli_with_its_option(tmp_path, capsys):
    """The job layer notes the verified work a failed job kept; the CLI's line names the
    option that uses it."""
    from launch import job_exit
    from pipelines.job import cleanup

    work = tmp_path / "w"
    work.mkdir()
    piece = work / "piece-000000~0123abcd.tfrecord"
    sidecar = json.dumps({"piece": str(piece)})
    piece.write_bytes(b"x" * (2000 - len(sidecar)))  # 2.0 KB with its sidecar
    (work / "piece-000000.json").write_text(sidecar)
    exc = OSError(28, "No space left on device")
    assert cleanup.after_failure(exc, str(work)) > 0
    assert "--resume" not in exc.tar2tf_held and str(work) in exc.tar2tf_held
    assert job_exit.exit_code("convert", exc, started=True) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("tar2tf convert: no space left on device; 2.0 KB of verified work")
    assert line.endswith(f"kept in {work} (rerun with --resume to use it, or delete it)"), line
