"""A worker process of Beam's local runner (``multi_processing`` mode), tied to its job.

Beam starts each such worker as ``python -m apache_beam.runners.worker.sdk_worker_main``;
tar2tf's local default (:func:`pipelines.beam.options.make_pipeline`) starts this module's
:func:`main` instead (``python -P -c``: nothing imported from the current directory, see
:mod:`pipelines.worker_python`), which runs that same main after three settings:

* **SIGINT ignored.**  A terminal's Ctrl-C goes to the whole foreground process group.  Each
  worker would die of it with its own KeyboardInterrupt traceback, and the runner's threads
  would print theirs, before tar2tf could print its one line.  Ignoring it leaves Ctrl-C to
  the launching process, whose runner then ends its workers as on any failure.
* **No traceback printed for a failed bundle** unless ``$TAR2TF_DEBUG`` is 1
  (:func:`pipelines.beam.worker_logs.quiet_beam_worker`): Beam logs it to the launcher too.
* **Death with the launcher** (Linux): a launcher killed by SIGTERM or SIGKILL cannot end its
  workers, and a worker left behind keeps converting for nobody, or waits for ever on its
  gRPC channels to the dead launcher (seen: a worker that had just started blocked in its
  log channel's ``channel_ready`` without a timeout).
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys

LAUNCHER_ENV = "TAR2TF_BEAM_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_launcher() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # no prctl: the worker lives as Beam's own would
    launcher = os.environ.get(LAUNCHER_ENV, "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(1)  # the launcher died before the setting above took effect


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_launcher()
    from pipelines.beam.worker_logs import DEBUG_ENV, quiet_beam_worker

    # a failed bundle's traceback: logged to the launcher, which says the failure in one line
    quiet_beam_worker(os.environ.get(DEBUG_ENV) == "1")
    runpy.run_module("apache_beam.runners.worker.sdk_worker_main", run_name="__main__")
    # The harness has finished: its bundles are done, their files closed and its logs sent.
    # What is left is the interpreter's own teardown (gRPC's threads, a heap of Beam
    # modules), which took seconds per worker, with the launcher waiting for it at the end
    # of every job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
