"""``tar2tf convert --resume`` when the job's own work directory is empty but an
interrupted run of the same inputs and output with other options left its work beside
it: the refusal names the options that differ, then and now (``pipelines.job.job_file``).
The same options resume as before; another job's leftovers keep the plain refusal."""

import glob
import json
import os

import pytest
from support import shardgen
from support.pcr_fixtures import requires_jpegtran

from launch.cli import main
from pipelines.beam.pcr import PcrConfig, convert_pcr
from pipelines.inprocess import journal as shard_journal
from pipelines.inprocess.driver import convert_in_process
from pipelines.job.kinds.tfrecord import kind as cv
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.lifecycle import work_dir_for
from pipelines.job.refused import OutputExistsError

N = 4


def _cfg(tmp_path, out="t", work_dir=None, last=N - 1, max_shard_size="4KB", **kw):
    return ConvertConfig(
        sources=str(tmp_path / "in" / f"train-{{0000..{last:04d}}}.tar"),
        output=str(tmp_path / "o" / f"{out}-{{}}.record"),
        max_shard_size=max_shard_size,
        progress=False,
        processes=0,
        work_dir=work_dir,
        **kw,
    )


def _interrupted_run(tmp_path, monkeypatch, **kw):
    """A real job that fails while converting input shard 2: the final shards its stream
    finished stay, journaled in its work directory (as after a crash or Ctrl-C)."""
    shardgen.make_shards(str(tmp_path / "in"), N, 6, size=(32, 32))
    real = cv.convert_to_piece

    def dies_on_shard_2(index, *a):
        if index == 2:
            raise RuntimeError("killed")
        return real(index, *a)

    monkeypatch.setattr(cv, "convert_to_piece", dies_on_shard_2)
    cfg = _cfg(tmp_path, **kw)
    with pytest.raises(RuntimeError, match="killed"):
        convert_in_process(cfg, num_workers=1)
    monkeypatch.setattr(cv, "convert_to_piece", real)
    work = work_dir_for(cfg, [str(tmp_path / "in" / f"train-{i:04d}.tar") for i in range(N)])
    point = shard_journal.load(work)
    assert point is not None and point.shards >= 1 and point.next_piece <= 2
    record = json.load(open(os.path.join(work, "job.json")))
    assert record["output"] == cfg.output and record["options"]["max_shard_size"] == 4000
    return cfg, work, point


def _outputs(d, stem="t"):
    """The output's shards, in order of their number."""
    names = [f for f in os.listdir(d) if f.startswith(stem + "-") and f.endswith(".record")]
    return {
        f: open(os.path.join(d, f), "rb").read()
        for f in sorted(names, key=lambda f: int(f[len(stem) + 1 : -7]))
    }


@pytest.mark.parametrize(
    "elsewhere", [False, True]
)  # the work root beside the output, or --work-dir
def test_resume_with_other_options_names_them_and_the_same_options_resume(
    tmp_path, monkeypatch, capfd, elsewhere
):
    work_dir = str(tmp_path / "w") if elsewhere else None
    cfg, work, point = _interrupted_run(tmp_path, monkeypatch, work_dir=work_dir)
    assert work.startswith(work_dir if elsewhere else str(tmp_path / "o" / ".tar2tf-work"))
    before = _outputs(tmp_path / "o")
    capfd.readouterr()
    args = [
        "convert",
        cfg.sources,
        "-o",
        cfg.output,
        "--resume",
        "--no-progress",
        "--processes",
        "0",
        # the in-process driver, as the interrupted run: it continues after its journal
        "--runner",
        "local",
    ] + (["--work-dir", work_dir] if elsewhere else [])

    assert main(args + ["--max-shard-size", "8KB", "--dali-index"]) == 4
    err = capfd.readouterr().err
    assert (
        f"but the interrupted run of these inputs and this output in {work} had other options "
        f"(dali_index: false then, true now; max_shard_size: 4000 then, 8000 now); rerun with its "
        f"options to resume it, or pass --overwrite to replace them" in err
    ), err
    # the Python API says the same, in its own words for the flags
    with pytest.raises(
        OutputExistsError,
        match=r"had other options \(type_map: \{\} then, "
        r"\{\"cls\": \"int64\"\} now\).*pass overwrite=True",
    ):
        convert_in_process(_cfg(tmp_path, work_dir=work_dir, type_map="cls:int64", resume=True))
    assert _outputs(tmp_path / "o") == before  # refused: nothing touched
    assert glob.glob(os.path.join(os.path.dirname(work), "*", "job.json")) == [
        os.path.join(work, "job.json")
    ]

    # the interrupted run's options: it resumes after its journal, into an uninterrupted run's bytes
    summary = str(tmp_path / "s.json")
    assert main(args + ["--max-shard-size", "4KB", "--summary-json", summary]) == 0, (
        capfd.readouterr().err
    )
    assert json.load(open(summary))["counters"]["shards_resumed"] == len(point.pieces) >= 1
    assert not os.path.exists(work)
    ref = convert_in_process(_cfg(tmp_path, out="ref"), num_workers=1)
    got = _outputs(tmp_path / "o")
    assert len(got) == len(ref.paths) > point.shards
    assert list(got.values()) == [open(p, "rb").read() for p in ref.paths]


def test_another_jobs_interrupted_run_keeps_the_plain_refusal(tmp_path, monkeypatch):
    """An interrupted run of other inputs, or of another output sharing the work root,
    is not this job with other options: the refusal stays the one without a culprit."""
    _interrupted_run(tmp_path, monkeypatch)
    # other inputs, to the output the interrupted run left shards in
    with pytest.raises(
        OutputExistsError, match="but no interrupted run of this job .* left work to resume"
    ):
        convert_in_process(_cfg(tmp_path, last=2, max_shard_size="8KB", resume=True))
    # another output in the same directory (same work root), finished, then resumed with other options
    assert convert_in_process(_cfg(tmp_path, out="u")).exit_code == 0
    with pytest.raises(
        OutputExistsError, match="but no interrupted run of this job .* left work to resume"
    ):
        convert_in_process(_cfg(tmp_path, out="u", max_shard_size="8KB", resume=True))


def test_resume_with_other_options_before_any_output_is_refused_naming_them(
    tmp_path, monkeypatch, capfd
):
    """A planned job (``-NNNNN-of-NNNNN`` names: its shards are written at the end)
    interrupted after two pieces left no output, only its work: ``--resume`` with other
    options is refused, naming them (as ``tar2tf pcr --resume``), instead of starting
    afresh beside the old run's work; with its options, it reuses the pieces."""
    shardgen.make_shards(str(tmp_path / "in"), N, 6, size=(32, 32))
    real = cv.convert_to_piece
    seen = []

    def dies_on_shard_2(index, *a):
        seen.append(index)
        if index == 2:
            raise RuntimeError("killed")
        return real(index, *a)

    monkeypatch.setattr(cv, "convert_to_piece", dies_on_shard_2)
    out = str(tmp_path / "o" / "t.record")
    cfg = ConvertConfig(
        sources=str(tmp_path / "in" / f"train-{{0000..{N - 1:04d}}}.tar"),
        output=out,
        max_shard_size="4KB",
        progress=False,
        processes=0,
    )
    with pytest.raises(RuntimeError, match="killed"):
        convert_in_process(cfg, num_workers=1)
    monkeypatch.setattr(cv, "convert_to_piece", real)
    assert not [f for f in os.listdir(tmp_path / "o") if f.endswith(".record")]
    args = [
        "convert",
        cfg.sources,
        "-o",
        out,
        "--resume",
        "--no-progress",
        "--processes",
        "0",
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
    ]
    capfd.readouterr()
    assert main(args + ["--max-shard-size", "8KB"]) == 2
    err = capfd.readouterr().err
    assert (
        "--resume: the interrupted run of these inputs and this output in " in err
        and "had other options (max_shard_size: 4000 then, 8000 now); rerun with its options to resume it, "
        "or without --resume to start afresh"
        in err
    ), err
    assert not [f for f in os.listdir(tmp_path / "o") if f.endswith(".record")]
    summary = str(tmp_path / "s.json")
    assert main(args + ["--max-shard-size", "4KB", "--summary-json", summary]) == 0, (
        capfd.readouterr().err
    )
    assert json.load(open(summary))["counters"]["shards_resumed"] == 2


@requires_jpegtran
def test_an_interrupted_convert_run_is_not_taken_for_a_pcr_run(tmp_path, monkeypatch):
    """``tar2tf pcr --resume`` into the directory of an interrupted ``convert`` run of the
    same inputs shares its work root: the convert run's record (it has an output) is not a
    PCR run with other options, so the PCR job starts (it has nothing of its own to resume)."""
    cfg, work, _ = _interrupted_run(tmp_path, monkeypatch)
    res = convert_pcr(
        PcrConfig(
            sources=cfg.sources,
            output=str(tmp_path / "o"),
            images_per_record=4,
            progress=False,
            resume=True,
        )
    )
    assert res.exit_code == 0 and res.totals["records_written"] == N * 6
    assert os.path.exists(os.path.join(work, "job.json"))  # the convert run's work is left alone


def test_a_record_with_malformed_options_explains_nothing(tmp_path):
    """A sibling job.json of the same inputs and output whose options are not a mapping
    (hand-edited, another tool's) is passed over: no crash, no culprit named."""
    from pipelines.job import job_file

    work = str(tmp_path / "w" / "mine")
    record = {
        "inputs": ["a.tar"],
        "output": "o-{}.record",
        "options": {"max_shard_size": 8000},
        "v": "1",
    }
    other = str(tmp_path / "w" / "other")
    os.makedirs(other)
    with open(os.path.join(other, "job.json"), "w") as f:
        json.dump(dict(record, options=["not", "a", "dict"]), f)
    assert job_file.find_conflict(work, record, same=("inputs", "output")) is None
    with open(os.path.join(other, "job.json"), "w") as f:
        json.dump(dict(record, options={"max_shard_size": 4000}), f)
    found = job_file.find_conflict(work, record, same=("inputs", "output"))
    assert found is not None and found.differences == ["max_shard_size: 4000 then, 8000 now"]
