"""Which driver runs a job, and Beam pipeline options with an offline, local default.

With no runner flag and no Beam option, a job runs on tar2tf's in-process driver
(``pipelines.inprocess``): the fastest path on one machine, with no Beam start-up to pay
(docs/benchmarks.md).  ``--runner inprocess`` names that driver (``local`` is an alias).
Any Beam pipeline option or Beam runner name makes it a Beam job, as TFDS builds with its
plain writer unless it is given Beam options.  ``--runner beam`` (and ``--runner DirectRunner``) runs Beam's own
local runner (FnApiRunner) in its ``multi_processing`` mode, with one SDK worker process
per core: the DoFns of the graph do the conversion in those processes, as they do on
Flink's or Dataflow's workers.  Processes, not threads, because Pillow's Python plugins,
tar headers and Example building hold the GIL between the codec calls.  Beam's own
``DirectRunner`` would first try to download the Prism binary (no network here, and a
stall risk on networks that drop packets); FnApiRunner is the engine DirectRunner falls
back to anyway.
"""

from __future__ import annotations

import logging
import os
from typing import List, Optional, Sequence

log = logging.getLogger("tar2tf")

LOCAL_RUNNER = "--runner=FnApiRunner"
DEFAULT_MODE = "multi_processing"
# the local runner's running mode when the job names none: a user (or a test suite) that
# runs many small jobs may prefer multi_threading, which starts no worker processes
MODE_ENV = "TAR2TF_DIRECT_RUNNING_MODE"
MODE_FLAG = "--direct_running_mode"
IN_PROCESS = "inprocess"  # --runner inprocess: the in-process driver, not a Beam runner
# the names --runner takes for it, IN_PROCESS first; "local" is kept as an alias
IN_PROCESS_NAMES = (IN_PROCESS, "local")
# runner names for Beam's local runner as tar2tf sets it up (FnApiRunner, multi_processing)
LOCAL_BEAM = ("beam", "directrunner")


def names_in_process(args: Sequence[str]) -> bool:
    """Whether ``args`` name tar2tf's in-process driver (``--runner inprocess``)."""
    return _has(args, "--runner") and runner_name(args).lower() in IN_PROCESS_NAMES


def in_process(args: Sequence[str], shuffle: bool = False) -> bool:
    """Whether a job given ``args`` (the flags tar2tf's parser left over) runs on the
    in-process driver: with ``--runner inprocess``, or with no Beam option at all -- unless it
    shuffles (``shuffle``), which only the Beam graph does.  Any Beam option is a Beam
    job: the user asked for Beam's behaviour, and the in-process driver would silently
    ignore it."""
    if names_in_process(args):
        return True
    return not args and not shuffle


def beam_only(args: Sequence[str]) -> List[str]:
    """The arguments other than ``--runner inprocess`` (and its value): with that runner they
    would be ignored, so the CLI refuses them (``launch.cli``)."""
    out: List[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a == "--runner" and i + 1 < len(args) and args[i + 1].lower() in IN_PROCESS_NAMES:
            skip = True
        elif a.lower() not in {f"--runner={n}" for n in IN_PROCESS_NAMES}:
            out.append(a)
    return out


def _has(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def effective_args(
    beam_args: Optional[Sequence[str]] = None, workers: Optional[int] = None
) -> List[str]:
    """``beam_args`` with tar2tf's local defaults; ``workers`` (default: the core count) is
    the local runner's worker count unless ``--direct_num_workers`` is given."""
    args = list(beam_args or [])
    if _has(args, "--runner") and runner_name(args).lower() in LOCAL_BEAM:
        args = _without(args, "--runner")  # then set up as with no runner: FnApiRunner
    if not _has(args, "--runner"):
        args = [LOCAL_RUNNER] + args
        if not _has(args, MODE_FLAG):
            mode = os.environ.get(MODE_ENV) or DEFAULT_MODE
            args.insert(1, f"{MODE_FLAG}={mode}")
    runner = runner_name(args)
    if runner in ("FnApiRunner", "DirectRunner") and not _has(args, "--direct_num_workers"):
        # in_memory runs one worker whatever the count (Beam warns about any other count)
        n = (
            1
            if _value(args, MODE_FLAG) == "in_memory"
            else int(workers or 0) or os.cpu_count() or 1
        )
        args.append(f"--direct_num_workers={n}")
    return args


def runner_name(args: Sequence[str]) -> str:
    name = "DirectRunner"
    for i, a in enumerate(args):
        if a.startswith("--runner="):
            name = a.split("=", 1)[1]
        elif a == "--runner" and i + 1 < len(args):
            name = args[i + 1]
    return name


def is_local(args: Sequence[str]) -> bool:
    return runner_name(args) in (
        "FnApiRunner",
        "DirectRunner",
        "BundleBasedDirectRunner",
        "SwitchingDirectRunner",
    )


def _value(args: Sequence[str], flag: str) -> Optional[str]:
    val = None
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            val = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(args):
            val = args[i + 1]
    return val


# the worker command as Beam's own, through pipelines.beam.sdk_worker (Ctrl-C and a killed
# launcher; see there); Beam runs it through a shell, so `exec` keeps the launcher the
# worker's parent.  `-c`, not `-m`: a `pipelines/` in the current directory would be found
# first (pipelines.worker_python keeps the current directory off the worker's path, and
# gives it the launcher's sys.path, where a user's op modules are found)
_WORKER_COMMAND = "{env}={pid} PYTHONPATH={path} exec {argv}"
_WORKER_CODE = "from pipelines.beam.sdk_worker import main; main()"


class _InMemoryModeNotice(logging.Filter):
    """Drops FnApiRunner's notice that ``in_memory`` with several workers runs one: with the
    worker environment given to the runner (below), the mode flag is left at its default, and
    the workers are processes all the same."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("If direct_num_workers is not equal to 1")


_NOTICE = _InMemoryModeNotice()


def make_pipeline(args: Sequence[str]):
    """A ``beam.Pipeline`` for ``args``, the job's Beam options with tar2tf's defaults
    already in (what :func:`effective_args` returns).  On the local runner's
    ``multi_processing`` mode, the runner gets its worker environment from here
    (:mod:`pipelines.beam.sdk_worker`)."""
    import shlex
    import sys

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    if runner_name(args) != "FnApiRunner" or _value(args, MODE_FLAG) != "multi_processing":
        return beam.Pipeline(options=PipelineOptions(list(args)))
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    from pipelines.beam.sdk_worker import LAUNCHER_ENV
    from pipelines.worker_python import launcher_path, python_c

    argv = " ".join(shlex.quote(a) for a in python_c(_WORKER_CODE, sys.executable))
    command = _WORKER_COMMAND.format(
        env=LAUNCHER_ENV, pid=os.getpid(), path=shlex.quote(launcher_path()), argv=argv
    )
    env = SubprocessSDKEnvironment.from_command_string(command)
    runner_log = logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner")
    if _NOTICE not in runner_log.filters:
        runner_log.addFilter(_NOTICE)
    return beam.Pipeline(
        runner=FnApiRunner(default_environment=env),
        options=PipelineOptions(_without(args, MODE_FLAG)),
    )


def _without(args: Sequence[str], flag: str) -> List[str]:
    out: List[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out
