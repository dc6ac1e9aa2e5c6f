"""``--ops module:function`` specs for tests: a conversion that takes a while (so that a
``kill -9`` lands in the middle of a job), and one that notes which process ran it.  The
records pass through unchanged."""

import os
import time

from transforms.ops import Func

DELAY = float(os.environ.get("TAR2TF_TEST_DELAY", "0.2"))


def slow(record):
    time.sleep(DELAY)
    return record


def slow_ops():
    return [Func(slow)]


def note_pid(record):
    """Leave this process's command line in $TAR2TF_TEST_PID_DIR/<pid>: which process ran
    the op (a Beam SDK worker, a tar2tf worker, the launching process)."""
    path = os.path.join(os.environ["TAR2TF_TEST_PID_DIR"], str(os.getpid()))
    if not os.path.exists(path):
        with open("/proc/self/cmdline", "rb") as src, open(path + ".tmp", "wb") as dst:
            dst.write(src.read())
        os.replace(path + ".tmp", path)
    return record


def pid_ops():
    return [Func(note_pid)]
