"""``lifecycle.run`` and its two drivers: what the run owns (the lock, the started mark on
a failure, the second run of a retyped job), and that the drivers never look at the
format (the kinds answer for it)."""

import ast
import dataclasses
import os

import pytest

from launch import job_exit
from pipelines.job import exits, lifecycle
from pipelines.job.kinds.pcr.config import PcrConfig
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.kind import TFRECORD

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..3}.tar")
GENERIC = ("output", "store", "resume", "overwrite", "max_rejects", "processes", "progress")
GENERIC += ("progress_every", "output_in_identity", "work_root", "describe")
DRIVERS = ("pipelines/job/lifecycle.py", "pipelines/beam/job.py", "pipelines/inprocess/driver.py")


def _imports(path: str):
    tree = ast.parse(open(os.path.join(ROOT, path)).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


@pytest.mark.parametrize("path", DRIVERS)
def test_the_lifecycle_and_its_drivers_import_no_kind_and_read_no_format(path):
    """A format branch lives in its kind: the lifecycle and the drivers reach a kind only
    through ``Kind``'s methods (the entry point picks it: ``pipelines.job.kinds.of``)."""
    kinds = [m for m in _imports(path) if m.startswith("pipelines.job.kinds.")]
    assert kinds == [], kinds
    tree = ast.parse(open(os.path.join(ROOT, path)).read())

    def is_cfg(node) -> bool:  # cfg, job.cfg, self.cfg
        return (isinstance(node, ast.Name) and node.id == "cfg") or (
            isinstance(node, ast.Attribute) and node.attr == "cfg"
        )

    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and is_cfg(n.value)}
    # the fields every kind's config has, and nothing a format alone has
    assert read <= set(GENERIC), read - set(GENERIC)
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    said = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert not named & {"ConvertConfig", "PcrConfig", "TFRECORD", "PCR"}
    assert not said & {"tfrecord", "array_record"}


def test_the_generic_fields_are_every_configs():
    for cls in (ConvertConfig, PcrConfig):
        fields = {f.name for f in dataclasses.fields(cls)} | set(dir(cls))
        assert set(GENERIC) <= fields, set(GENERIC) - fields


class _Failing(lifecycle.Driver):
    def __init__(self, where: str):
        self.where = where

    def build(self, job):
        if self.where == "build":
            raise ValueError("bad ops")

    def execute(self, job):
        raise ValueError("a value the job could not write")


def _cfg(tmp_path, **kw):
    return ConvertConfig(sources=DEMO, output=str(tmp_path / "o" / "t-{}.record"), **kw)


def test_a_failure_says_whether_the_job_had_started_and_releases_the_lock(tmp_path):
    """A ``ValueError`` before the job writes is bad usage (exit 2), once it writes the
    job's failure (exit 1): the exception carries it, so the next job of the same process
    starts with no phase of its own -- set-up errors stay usage errors."""
    with pytest.raises(ValueError) as late:
        lifecycle.run(TFRECORD, _cfg(tmp_path), _Failing("execute"))
    assert exits.started(late.value) and exits.classify(late.value)[0] == exits.FAILED
    with pytest.raises(ValueError) as early:  # the lock was released: taken again
        lifecycle.run(TFRECORD, _cfg(tmp_path), _Failing("build"))
    assert not exits.started(early.value)
    assert job_exit.exit_code("convert", early.value) == exits.USAGE
    chained = RuntimeError("wrapped by a runner")
    chained.__cause__ = late.value
    assert exits.started(chained)


def test_each_config_names_its_kind():
    from pipelines.job import kinds
    from pipelines.job.kinds.pcr.kind import PCR

    assert kinds.of(ConvertConfig(sources=DEMO, output="o/t-{}.record")) is TFRECORD
    assert kinds.of(PcrConfig(sources=DEMO, output="o")) is PCR
    with pytest.raises(TypeError, match="dict"):
        kinds.of({})


def test_the_in_process_plan_is_the_kinds_answer(tmp_path):
    """What the in-process driver asks: a ``{}`` TFRecord output streams, a named one or an
    ArrayRecord one is planned, a shuffle is refused; PCR converts on threads, planned."""
    from pipelines.job.kinds.pcr.kind import PCR

    streamed = TFRECORD.in_process(_cfg(tmp_path, max_shard_size="1MB"))
    assert streamed.stream is not None and streamed.stream.max_bytes == 1_000_000
    assert streamed.processes and streamed.refused is None
    listed = ConvertConfig(sources=DEMO, output=str(tmp_path / "t.record"))
    assert TFRECORD.in_process(listed).stream is None
    arrays = ConvertConfig(sources=DEMO, output=str(tmp_path / "t-{}.array_record"))
    assert TFRECORD.in_process(arrays).stream is None
    assert "Beam" in TFRECORD.in_process(_cfg(tmp_path, shuffle=True)).refused
    pcr = PCR.in_process(PcrConfig(sources=DEMO, output=str(tmp_path / "p")))
    assert pcr.stream is None and not pcr.processes and pcr.refused is None
