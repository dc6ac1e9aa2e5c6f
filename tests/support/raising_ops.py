"""An ``--ops`` spec for tests of a failure inside a job (not a reject): an op that cannot
be rebuilt where the runner runs it (a thread of Beam's local runner) raises
``ValueError`` there, after the job has started -- as a user op whose resources are
missing on a worker would."""

import threading

from transforms.ops import Func


def _rebuilt(fn):
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("the op cannot be rebuilt on this worker")
    return Unbuildable(fn)


def keep(record):
    return record


class Unbuildable(Func):
    def __reduce__(self):
        return (_rebuilt, (self.f,))


def value_error_in_job():
    return [Unbuildable(keep)]
