"""An ``--ops module:function`` spec for tests that need a conversion to take a while
(so that a ``kill -9`` lands in the middle of a job).  The records pass through unchanged."""

import os
import time

from transforms.ops import Func

DELAY = float(os.environ.get("TAR2TF_TEST_DELAY", "0.2"))


def slow(record):
    time.sleep(DELAY)
    return record


def slow_ops():
    return [Func(slow)]
