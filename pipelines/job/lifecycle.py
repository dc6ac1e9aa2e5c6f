"""The life of a conversion job, the same for both drivers and both formats::

    prepare -> start -> convert units -> plan -> write -> finish -> result

* :func:`prepare` (the launching process): the options checked, the inputs resolved into
  units (input shards, or slices of an image folder) and the listing's rejects, the
  output's lock taken, the outputs checked against overwrite / resume, the work directory
  chosen.  Nothing is written yet: an error here is a usage error (``pipelines.job.exits``).
* :func:`start`: the job's record into its work directory (for a refused resume) and an
  earlier run's manifest replaced by the ledger of its outputs (``pipelines.job.replace``).
* convert units, plan, write: the kind's work, run by a driver -- the Beam graph
  (``pipelines.beam.job``: one step each, on workers) or the in-process driver
  (``pipelines.inprocess.driver``: threads or a worker pool, shards written as pieces arrive).
* :func:`finish` (the graph's last step): the output's lock read again (a job whose lock
  another job took stops there, exit 4: :func:`check_held`), stale outputs of an earlier
  run removed, the kind's manifest and rejects written (the commit point); returns the
  manifest.
* :func:`result_of` (the launching process, once the job has finished): the work
  directory deleted, the lock released, what the caller gets back.  The work directory
  outlives :func:`finish` because a cluster may run a step again after it (Flink re-runs
  the tasks whose results a lost worker held), and a write run again needs its pieces.

:func:`run` is the one run of a job, whichever driver executes its middle steps: a
:class:`Driver` builds what can fail before anything is written (:meth:`Driver.build`),
then converts, plans, writes and finishes the started job (:meth:`Driver.execute`).  The
two drivers are the Beam graph (``pipelines.beam.job.BeamDriver``) and the in-process
driver (``pipelines.inprocess.driver.InProcessDriver``); neither looks at the format.

A :class:`Kind` is what a format supplies: its units, output checks, unit work, plan,
writer and manifest (``pipelines.job.kinds.tfrecord.kind``, ``pipelines.job.kinds.pcr.kind``),
and one answer for the in-process driver (:meth:`Kind.in_process`: whether its outputs
can be written while units convert, whether its units convert in worker processes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import transforms
from pipelines.job import cleanup, exits, job_file, output_lock
from transforms.record_types import Reject
from transforms.stores import get_store, join, split_url
from transforms.tar.sources import is_missing


class Converted(NamedTuple):
    """A unit just converted, as the in-process driver's stream takes it: its summary
    (all a job keeps of it) and, for a TFRecord piece, its records' framed ``sizes`` (None:
    in its record file) and ``frames`` held in memory (None: in its piece file)."""

    summary: Any
    sizes: Optional[List[int]] = None
    frames: Optional[List[bytes]] = None


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """Final shards the in-process driver may write while later units still convert, in
    unit order (``pipelines.inprocess.stream``): their ``{}`` name template (names that
    need no shard count), bounds, and how they are written."""

    output: str
    max_bytes: Optional[int]
    max_records: Optional[int]
    dali_index: bool = False
    spool_limit: Optional[int] = None  # bytes of finished shards that may wait for upload


@dataclasses.dataclass(frozen=True)
class InProcessPlan:
    """What a format tells the in-process driver (``pipelines.inprocess.driver``) about a
    job: the facts of the format, never how the driver runs them."""

    # why this job can only run as a Beam graph, or None
    refused: Optional[str] = None
    # the outputs can be written while later units still convert, in unit order; None:
    # planned (Kind.plan) once every unit is converted
    stream: Optional[StreamSpec] = None
    # the units can be converted in worker processes (``pipelines.inprocess.pool``)
    processes: bool = False
    # the job does real work per record (decode, resize, ...): a worker process pays off
    heavy: bool = False


@dataclasses.dataclass
class Ended:
    """What a job's finish step gets: the rows of the written outputs, the units'
    summaries, and the job's facts from :func:`prepare`."""

    rows: List[Any]
    summaries: Sequence[Any]
    list_rejects: List[Reject]
    inputs: List[str]
    extras: Dict[str, Any]


class Kind:
    """A format's part of the lifecycle: what it writes and how, never which runner runs
    it.  Stateless: the Beam graph pickles it into its steps.  ``cfg`` is the format's
    config (``ConvertConfig``, ``PcrConfig``)."""

    name = ""  # the command that runs it (what the output's lock names)

    # -- the job, in the launching process --------------------------------------------

    def checked(self, cfg):
        """A copy of the config as the job runs it (the caller's is left as it is);
        ``ValueError`` (or ``RuntimeError``: a missing tool) for what makes the job
        impossible, before anything is touched."""
        return cfg

    def units(self, cfg) -> Tuple[List[Any], List[Reject], List[str], Dict[str, Any]]:
        """``(units, listing rejects, input names, extras for the manifest)``; a unit is a
        small tuple (:meth:`unit_index` says its index)."""
        raise NotImplementedError

    def lock_url(self, cfg) -> str:
        raise NotImplementedError

    def check_outputs(self, cfg, work: str, inputs: List[str]) -> None:
        """Raise a refusal (``pipelines.job.refused``) or ``ValueError`` when the job may
        not write its outputs; the output's lock is held."""

    def begin(self, job: "Job") -> None:
        """:func:`start`'s part that is the format's: ``replace.begin`` of its manifest."""
        raise NotImplementedError

    def in_process(self, cfg) -> InProcessPlan:
        """What the in-process driver needs to know of this job (:class:`InProcessPlan`)."""
        return InProcessPlan()

    # -- one unit, on a worker ----------------------------------------------------------

    def unit_index(self, unit) -> int:
        return unit[0]

    def stages(self, cfg):
        """What :meth:`convert` needs built once per worker (ops), or None."""
        return None

    def reuse(self, cfg, work: str, unit) -> Optional[Any]:
        """The summary of the verified work an interrupted run left for ``unit``, or None
        (asked only when the job resumes: :func:`reused`)."""
        return None

    def convert(self, cfg, work: str, unit, stages, hold: int = 0) -> Converted:
        """``unit`` converted into the work directory.  ``hold`` > 0: data up to that many
        bytes may stay in memory, in the result, instead of a work file (the in-process
        driver's stream writes it once)."""
        raise NotImplementedError

    def counts(self, summary) -> Dict[str, int]:
        """What one converted unit adds to the job's counters (``pipelines.job.counts``)."""
        raise NotImplementedError

    # -- the outputs --------------------------------------------------------------------

    def plan(self, summaries: Sequence[Any], cfg) -> Iterator[Any]:
        """The write tasks, once every unit is converted (streamed)."""
        raise NotImplementedError

    def task_index(self, task) -> int:
        """A write task's index: what spreads the writes over the workers."""
        return task["index"]

    def write(self, task, cfg) -> Dict[str, Any]:
        """One output file written from its task, atomically -> its row."""
        raise NotImplementedError

    def finish(self, cfg, ended: Ended) -> Dict[str, Any]:
        """Stale outputs removed, the manifest and rejects written (the commit point); the
        manifest."""
        raise NotImplementedError

    def manifest_path(self, cfg) -> str:
        raise NotImplementedError

    def failed_output(self, cfg) -> Optional[str]:
        """The output whose temporaries a failed job removes (``cleanup.after_failure``)."""
        return None

    def result(self, job: "Job", **common) -> "ConvertResult":
        """The result of a finished job: ``common`` (the :class:`ConvertResult` fields)
        and what the kind adds."""
        return ConvertResult(**common)

    def again(self, cfg, manifest: Dict[str, Any]):
        """The config of a second run the finished job asks for, or None."""
        return None


class Driver:
    """A driver's part of :func:`run`: the Beam graph (``pipelines.beam.job``) or the
    in-process driver (``pipelines.inprocess.driver``)."""

    def build(self, job: "Job") -> None:
        """What can fail before the job writes anything (a graph built, ops pickled): a
        failure here leaves no file behind."""

    def execute(self, job: "Job") -> Tuple[Dict[str, int], Optional[Dict[str, Any]]]:
        """Convert, plan, write and finish the started job: ``(counters, manifest)`` --
        the manifest as :func:`finish` returned it in this process, or None when it was
        written elsewhere (a Beam worker)."""
        raise NotImplementedError


@dataclasses.dataclass
class Job:
    """A job after :func:`prepare`."""

    kind: Kind
    cfg: Any
    units: List[Any]
    inputs: List[str]
    list_rejects: List[Reject]
    extras: Dict[str, Any]
    work: str
    started: float
    lock: Optional[output_lock.OutputLock] = None  # released by result_of / cleaned_on_failure
    # the output as the caller spelt it (``cfg.output`` is resolved: ``names.resolved``),
    # for the paths a result hands back
    given_output: Optional[str] = None

    @property
    def held(self) -> Optional[Tuple[str, str]]:
        """``(lock URL, token)`` of the output's lock, plain values a worker checks before
        the commit point (:func:`check_held`); None for an unlocked output."""
        token = getattr(self.lock, "token", None)
        return (self.kind.lock_url(self.cfg), token) if token else None

    @property
    def urls(self) -> List[str]:
        """A TFRecord job's input shards (its inputs, in unit order)."""
        return self.inputs

    def release(self) -> None:
        """The output's lock released at once: a job that failed before it ran leaves the
        next job of a long-lived process (a notebook) free to take it."""
        if self.lock is not None:
            self.lock.release()


@dataclasses.dataclass
class ConvertResult:
    paths: List[str]
    manifest: Dict[str, Any]
    manifest_path: str
    rejects_path: str
    totals: Dict[str, int]
    counters: Dict[str, int]
    seconds: float
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class NoInputError(ValueError):
    """None of the job's sources exists: a usage error (exit 2), raised before anything is
    written.  (A job that ran would write an empty dataset's manifest and exit 3.)"""


def check_found(units: List[Any], list_rejects: List[Reject]) -> None:
    """Raise :class:`NoInputError`, naming the first missing source, when there are no
    units and every listing reject is a missing source.  A listing that failed (an
    unreachable store) is not the user's typo: that job runs, and its rejects say why."""
    if units or not list_rejects or not all(is_missing(r) for r in list_rejects):
        return
    first, more = list_rejects[0].shard, len(list_rejects) - 1
    raise NoInputError(
        f"no input found: {first} does not exist"
        + (f" ({more} other source{'s are' if more > 1 else ' is'} missing too)" if more else "")
    )


def prepare(kind: Kind, cfg) -> Job:
    """Check the options, resolve the inputs, take the output's lock, check the outputs
    and choose the work directory.  Raises ``ValueError`` for bad options and a refusal
    (``pipelines.job.refused``) for outputs it may not replace."""
    t0 = time.time()
    # usage errors first: taking the lock may create the output directory, and a refused
    # command must leave nothing behind
    given_output = getattr(cfg, "output", None)
    cfg = kind.checked(cfg)
    units, list_rejects, inputs, extras = kind.units(cfg)
    check_found(units, list_rejects)
    work = work_dir_for(cfg, inputs)
    lock = output_lock.acquire(  # before the outputs are looked at
        kind.lock_url(cfg), cfg.store, output=cfg.output, command=kind.name
    )
    try:
        kind.check_outputs(cfg, work, inputs)
    except BaseException:
        lock.release()
        raise
    return Job(kind, cfg, units, inputs, list_rejects, extras, work, t0, lock, given_output)


def start(job: Job) -> None:
    """The job starts writing (see the module docstring)."""
    job_file.write(job.work, job_of(job.cfg, job.inputs), job.cfg.store)
    job.kind.begin(job)


def run(kind: Kind, cfg, driver: Driver) -> ConvertResult:
    """The one run of a job, whichever driver executes it (the module docstring): prepare,
    :meth:`Driver.build`, start, :meth:`Driver.execute`, the result -- and the second
    run a finished job asks for (:meth:`Kind.again`: a job whose features had several
    types), by the same driver.  An error raised once the job has started carries
    ``tar2tf_started`` (``pipelines.job.exits.started``): a ``ValueError`` then is the
    job's failure, not bad usage."""
    job = prepare(kind, cfg)
    try:
        driver.build(job)
    except BaseException:
        # nothing ran yet, so there is nothing to clean up, but the output's lock is held
        # since prepare(): left to the garbage collector, it would refuse the next job of
        # a long-lived process (a notebook) until the process ends
        job.release()
        raise
    try:
        with cleaned_on_failure(job):
            start(job)
            counters, manifest = driver.execute(job)
            res = result_of(job, counters, manifest)
    except BaseException as e:
        exits.mark_started(e)
        raise
    again = kind.again(job.cfg, res.manifest)
    return res if again is None else run(kind, again, driver)


def reused(kind: Kind, cfg, work: str, unit) -> Optional[Any]:
    """The summary of the verified work an interrupted run left for ``unit`` when the job
    resumes, else None: what either driver asks before it converts a unit."""
    return kind.reuse(cfg, work, unit) if cfg.resume else None


def convert_unit(kind: Kind, cfg, work: str, unit, stages) -> Tuple[Any, bool]:
    """``(summary, reused)`` of one unit: with ``resume``, the verified work an interrupted
    run left (``reused``); else the unit converted into the work directory."""
    found = reused(kind, cfg, work, unit)
    if found is not None:
        return found, True
    return kind.convert(cfg, work, unit, stages).summary, False


def reaches_bucket(unit: Sequence[Any], work: str) -> bool:
    """Whether converting ``unit`` reads or writes an object store (its input's URL, or
    the work directory): its requests are round trips, which a driver overlaps by
    converting several such units at once."""
    return any(isinstance(x, str) and split_url(x)[0] != "" for x in (*unit, work))


def check_held(held: Optional[Tuple[str, str]], config) -> None:
    """Raise ``OutputLockedError`` (exit 4) unless this job still holds its output's lock
    (``held``: :attr:`Job.held`): what a job checks before its commit point, in the
    process that commits (a Beam worker, or the launching process)."""
    if held is not None:
        output_lock.check_held(held[0], held[1], config)


@contextlib.contextmanager
def cleaned_on_failure(job: Job) -> Iterator[None]:
    """A failed job leaves only verified work (``pipelines.job.cleanup``).  A job whose
    lock another job took touches nothing: the output's temporaries and the work
    directory may now be that job's (the same job run again has the same work directory)."""
    try:
        yield
    except BaseException as e:
        try:
            check_held(job.held, job.cfg.store)
        except output_lock.OutputLockedError as lost:
            job.release()  # deletes nothing: the lock is the other job's now
            if isinstance(e, output_lock.OutputLockedError):
                raise
            raise lost from e  # a runner's wrapping of the worker's refusal: exit 4
        except Exception:  # the lock cannot be read (a store fault): the failure stands
            pass
        try:
            cleanup.after_failure(e, job.work, job.kind.failed_output(job.cfg), job.cfg.store)
        finally:
            job.release()
        raise


def finish(job: Job, rows, summaries) -> Dict[str, Any]:
    """The kind's finish in the launching process (the in-process driver)."""
    ended = Ended(list(rows), summaries, job.list_rejects, job.inputs, job.extras)
    return finish_on(job.held, job.kind, job.cfg, ended)


def finish_on(held, kind: Kind, cfg, ended: Ended) -> Dict[str, Any]:
    """The kind's finish (stale outputs removed, the manifest written: the commit point)
    where it runs, once the lock is read again: a job whose lock was taken while it ran
    must not remove or describe the files of the job that took it."""
    check_held(held, cfg.store)
    return kind.finish(cfg, ended)


def result_of(
    job: Job, counters: Dict[str, int], manifest: Optional[Dict[str, Any]] = None
) -> ConvertResult:
    """The finished job's result, from its manifest (``manifest``: what :func:`finish`
    returned in this process; else read back, as a Beam job's last step wrote it on a
    worker); its work directory deleted."""
    cfg, kind = job.cfg, job.kind
    # another job took the output over while this one ran: fail, leaving the work
    # directory (it may be that job's now) to it
    check_held(job.held, cfg.store)
    cleanup.remove_work(job.work, cfg.store)
    if job.lock is not None:
        job.lock.release()
        job.lock.check()
    mpath = kind.manifest_path(cfg)
    if manifest is None:
        manifest = json.loads(get_store(mpath, cfg.store).read_bytes(mpath))
    return kind.result(
        job,
        paths=[s["path"] for s in manifest["shards"]],
        manifest=manifest,
        manifest_path=mpath,
        rejects_path=manifest["rejects"]["path"],
        totals=manifest["totals"],
        counters=counters,
        seconds=time.time() - job.started,
        exit_code=exits.of_totals(
            manifest["totals"], manifest["rejects"]["count"], cfg.max_rejects
        ),
    )


def job_of(cfg, inputs: List[str]) -> Dict[str, Any]:
    """What the job is, for either format: its work directory's fingerprint and record
    (``pipelines.job.job_file``).  A TFRecord job's names its output; a PCR job's does not
    (``PcrConfig.output_in_identity``: its work directory is inside its output)."""
    job = {"inputs": inputs, "options": cfg.describe(), "v": transforms.__version__}
    if cfg.output_in_identity:
        job["output"] = cfg.output
    return job


def work_dir_for(cfg, inputs: List[str]) -> str:
    """Same job (:func:`job_of`) -> same work dir, which is what makes ``resume`` find
    pieces or unit blobs (and only this job's: another output's journal lists other
    shards).  Under the config's ``work_root()`` (TFRecord: ``work_dir`` or
    ``.tar2tf-work`` beside the output; PCR: inside its output directory)."""
    key = json.dumps(job_of(cfg, inputs), sort_keys=True)
    fp = hashlib.sha256(key.encode()).hexdigest()[:16]
    return join(cfg.work_root(), fp)
