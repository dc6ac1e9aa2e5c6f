"""The TFRecord kind's checks and reruns (``pipelines.job.kinds.tfrecord.kind``), called
directly on a local output: ``check_outputs``, what a job may start over (outputs that
exist need ``overwrite``, or ``resume`` of this very job), and ``retyped``, the job run
again when a feature's records disagreed on its type."""

import dataclasses
import logging
import os

import pytest

from pipelines.inprocess import journal
from pipelines.job import job_file, names
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.kind import check_outputs, retyped
from pipelines.job.lifecycle import job_of, work_dir_for
from pipelines.job.overlap import OutputOverlapsInput
from pipelines.job.refused import OutputExistsError, ResumeConflict

CLI_WORDS = {"overwrite": "--overwrite", "resume": "--resume"}


def _touch(path) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x")
    return path


@pytest.fixture
def job(tmp_path):
    """A job's inputs and output template; ``cfg(**options)`` builds its config."""
    inputs = [_touch(str(tmp_path / "in" / "data-0.tar"))]
    output = str(tmp_path / "out" / "t-{}.record")

    def cfg(**options):
        return ConvertConfig(sources=inputs, output=options.pop("output", output), **options)

    return inputs, output, cfg


def _check(cfg, inputs):
    check_outputs(cfg, work_dir_for(cfg, inputs), inputs)


def _interrupted(cfg, inputs):
    """An interrupted run of ``cfg``: its record and one journaled shard in its work
    directory, the shard in the output."""
    work = work_dir_for(cfg, inputs)
    job_file.write(work, job_of(cfg, inputs))
    path = _touch(names.fill(cfg.output, 1))
    journal.write(work, 1, {"path": path, "records": 1, "bytes": 1, "crc32c": "0"}, [], [1, 0])
    return work


def test_a_new_output_may_be_written_with_or_without_resume(job):
    inputs, _, cfg = job
    _check(cfg(), inputs)
    _check(cfg(resume=True), inputs)  # nothing to resume: the job starts afresh
    _check(cfg(overwrite=True), inputs)


def test_outputs_that_exist_are_refused_without_overwrite(job):
    inputs, output, cfg = job
    shard = _touch(names.fill(output, 1))
    with pytest.raises(OutputExistsError) as e:
        _check(cfg(), inputs)
    assert isinstance(e.value, OutputExistsError)
    assert str(e.value) == (
        f"1 output file(s) already match {output} (e.g. {shard}); "
        "pass overwrite=True to replace them"
    )
    assert str(e.value.worded(CLI_WORDS)).endswith("pass --overwrite to replace them")
    _check(cfg(overwrite=True), inputs)


def test_outputs_an_interrupted_run_of_this_job_left_suggest_resume(job):
    inputs, _, cfg = job
    _interrupted(cfg(), inputs)
    with pytest.raises(OutputExistsError) as e:
        _check(cfg(), inputs)
    said = str(e.value.worded(CLI_WORDS))
    assert said.endswith(
        ": an interrupted run of this job left them; pass --resume to continue it, "
        "or --overwrite to start over"
    )
    _check(cfg(resume=True), inputs)  # its work is there: resumed


def test_resume_without_work_of_this_job_refuses_outputs_that_exist(job):
    inputs, output, cfg = job
    _touch(names.fill(output, 1))  # a finished job's output: its work directory is gone
    c = cfg(resume=True)
    with pytest.raises(OutputExistsError) as e:
        _check(c, inputs)
    assert (
        "but no interrupted run of this job (same inputs, options and output) left work to "
        f"resume in {work_dir_for(c, inputs)}; pass overwrite=True to replace them"
    ) in str(e.value)


def test_resume_of_a_run_with_other_options_names_them(job):
    inputs, _, cfg = job
    work = _interrupted(cfg(records_per_shard=5), inputs)
    os.remove(names.fill(cfg().output, 1))  # no output yet (a planned job writes at its end)

    with pytest.raises(ResumeConflict) as e:
        _check(cfg(resume=True), inputs)
    assert isinstance(e.value, ValueError)
    assert str(e.value.worded(CLI_WORDS)) == (
        f"--resume: the interrupted run of these inputs and this output in {work} had other "
        "options (records_per_shard: 5 then, null now); rerun with its options to resume it, "
        "or without --resume to start afresh"
    )
    _check(cfg(resume=True, records_per_shard=5), inputs)  # its options: resumed


def test_resume_of_a_run_with_other_options_that_left_outputs_names_them(job):
    inputs, _, cfg = job
    work = _interrupted(cfg(records_per_shard=5), inputs)
    with pytest.raises(OutputExistsError) as e:
        _check(cfg(resume=True), inputs)
    said = str(e.value.worded(CLI_WORDS))
    assert f"but the interrupted run of these inputs and this output in {work}" in said
    assert "(records_per_shard: 5 then, null now)" in said
    assert said.endswith("or pass --overwrite to replace them")


def test_another_outputs_interrupted_run_is_not_this_jobs(job, tmp_path):
    inputs, _, cfg = job
    _interrupted(cfg(output=str(tmp_path / "out" / "u-{}.record")), inputs)
    _check(cfg(resume=True), inputs)  # starts afresh: nothing of this output to refuse


def test_overwrite_never_lets_the_output_land_on_an_input(tmp_path):
    inputs = [_touch(str(tmp_path / "data-1.tar"))]
    cfg = ConvertConfig(sources=inputs, output=str(tmp_path / "data-{}.tar"), overwrite=True)
    with pytest.raises(OutputOverlapsInput):
        _check(cfg, inputs)


def _manifest(**schema):
    return {"schema": {n: dict(s, shape=[1]) for n, s in schema.items()}}


def test_a_job_whose_features_had_one_type_each_is_not_run_again(job):
    _, _, cfg = job
    m = _manifest(jpg={"dtype": "bytes"}, cls={"dtype": "int64"})
    assert retyped(cfg(), m) is None


def test_a_feature_of_several_types_is_run_again_with_its_first(job, caplog):
    _, _, cfg = job
    c = cfg(type_map={"jpg": "bytes"}, resume=True, records_per_shard=7)
    m = _manifest(
        jpg={"dtype": "bytes"},
        cls={"dtype": "mixed", "first_dtype": "int64"},
        score={"dtype": "mixed", "first_dtype": "float"},
    )
    with caplog.at_level(logging.WARNING, logger="tar2tf"):
        again = retyped(c, m)

    assert again.type_map == {"jpg": "bytes", "cls": "int64", "score": "float"}
    assert again.overwrite and not again.resume  # the first pass's output is replaced
    assert dataclasses.replace(again, type_map=c.type_map, overwrite=False, resume=True) == c
    assert c.type_map == {"jpg": "bytes"} and c.resume  # the first pass's config as it was
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "(as if the type map gave cls:int64, score:float)" in warning


def test_a_mixed_feature_the_type_map_names_or_of_no_first_type_is_not_run_again(job):
    _, _, cfg = job
    named = _manifest(cls={"dtype": "mixed", "first_dtype": "bytes"})
    assert retyped(cfg(type_map={"cls": "int64"}), named) is None  # a second pass ends the same
    assert retyped(cfg(), _manifest(cls={"dtype": "mixed"})) is None
