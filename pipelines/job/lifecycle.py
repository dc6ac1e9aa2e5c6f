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

A :class:`Kind` is what a format supplies: its units, output checks, unit work, plan,
writer and manifest (``pipelines.job.kinds.tfrecord.kind``, ``pipelines.job.kinds.pcr.kind``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import transforms
from pipelines.job import cleanup, exits, job_file, output_lock
from transforms.record_types import Reject
from transforms.stores import dirname, get_store, join
from transforms.tar.sources import is_missing


class Kind:
    """A format's part of the lifecycle.  Stateless: the Beam graph pickles it into its
    steps.  ``cfg`` is the format's config (``ConvertConfig``, ``PcrConfig``)."""

    name = ""  # the command that runs it (what the output's lock names)
    # the names of the Beam graph's steps, for a job's logs and a runner's UI
    # (``pipelines.beam.job``)
    steps: Dict[str, str] = {}
    index_at = 0  # where a unit (a tuple) holds its index

    def checked(self, cfg):
        """The config as the job runs it; ``ValueError`` (or ``RuntimeError``: a missing
        tool) for what makes the job impossible, before anything is touched."""
        return cfg

    def units(self, cfg) -> Tuple[List[Any], List[Reject], List[str], Dict[str, Any]]:
        """``(units, listing rejects, input names, extras for the manifest)``; a unit is a
        tuple that holds its index at :attr:`index_at`."""
        raise NotImplementedError

    def lock_url(self, cfg) -> str:
        raise NotImplementedError

    def check_outputs(self, cfg, work: str, inputs: List[str]) -> None:
        """Raise a refusal (``pipelines.job.refused``) or ``ValueError`` when the job may
        not write its outputs; the output's lock is held."""

    def begin(self, job: "Job") -> None:
        """:func:`start`'s part that is the format's: ``replace.begin`` of its manifest."""
        raise NotImplementedError

    def convert_unit(
        self, cfg, work: str, unit, stages, convert: Optional[Callable] = None
    ) -> Tuple[Any, bool]:
        """``(summary, reused)``: with ``resume``, the verified work an interrupted run
        left (``reused``); else the unit converted into the work directory, by
        ``convert(unit)`` when given, whose result is returned as it is (the in-process
        driver's: its worker processes, or a ``ConvertedPiece`` that keeps its sizes for its
        stream).  A summary is a TFRecord piece's ``PieceSummary`` or a PCR unit's dict."""
        raise NotImplementedError

    def stages(self, cfg):
        """What :meth:`convert_unit` needs built once per worker (ops), or None."""
        return None

    def counts(self, summary) -> Dict[str, int]:
        """What one converted unit adds to the job's counters."""
        raise NotImplementedError

    def plan(self, summaries: Sequence[Any], cfg) -> Iterator[Any]:
        """The write tasks, once every unit is converted (streamed)."""
        raise NotImplementedError

    def task_index(self, task) -> int:
        """A write task's index: what spreads the writes over the workers."""
        return task["index"]

    def write(self, task, cfg) -> Dict[str, Any]:
        """One output file written from its task, atomically -> its row."""
        raise NotImplementedError

    def finish(self, rows, summaries, cfg, list_rejects, inputs, extras) -> Dict[str, Any]:
        """Stale outputs removed, the manifest and rejects written; the manifest."""
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
    return finish_on(
        job.held, job.kind, rows, summaries, job.cfg, job.list_rejects, job.inputs, job.extras
    )


def finish_on(held, kind: Kind, rows, summaries, cfg, list_rejects, inputs, extras):
    """The kind's finish (stale outputs removed, the manifest written: the commit point)
    where it runs, once the lock is read again: a job whose lock was taken while it ran
    must not remove or describe the files of the job that took it."""
    check_held(held, cfg.store)
    return kind.finish(rows, summaries, cfg, list_rejects, inputs, extras)


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
    if getattr(cfg, "output_in_identity", True):
        job["output"] = cfg.output
    return job


def work_dir_for(cfg, inputs: List[str]) -> str:
    """Same job (:func:`job_of`) -> same work dir, which is what makes ``resume`` find
    pieces or unit blobs (and only this job's: another output's journal lists other
    shards).  Under ``cfg.work_root()`` where the config has one (PCR: inside its output
    directory), else ``cfg.work_dir`` or ``.tar2tf-work`` beside the output."""
    key = json.dumps(job_of(cfg, inputs), sort_keys=True)
    fp = hashlib.sha256(key.encode()).hexdigest()[:16]
    if hasattr(cfg, "work_root"):
        root = cfg.work_root()
    else:
        root = cfg.work_dir or join(dirname(cfg.output), ".tar2tf-work")
    return join(root, fp)
