"""TensorFlow without its CUDA noise on a machine without a GPU driver.

A CUDA build of TensorFlow initializes its devices at the first op, and on a machine with
no GPU driver that prints ``E0000 ... failed call to cuInit: ... UNKNOWN ERROR (303)`` on
stderr: an error line about nothing the user did.  ``TF_CPP_MIN_LOG_LEVEL`` hides it only
at 3, which hides every real TensorFlow error too, and must be set before TensorFlow is
imported (by then the user's own ``import tensorflow`` has read it).  Hiding GPUs does not
help: enumerating devices is what calls ``cuInit``.

So tar2tf initializes the devices itself, once, with the process's stderr passed through a
filter that drops that one line; only when no GPU driver can be loaded (with a driver the
line would be a real error), and without changing any setting: a user's
``TF_CPP_MIN_LOG_LEVEL``, ``CUDA_VISIBLE_DEVICES`` or ``tf.config`` choices stay theirs.

A command of tar2tf's own that needs TensorFlow (``tar2tf pcr-report``) imports it with
:func:`quiet_import`, which also drops TensorFlow's start-up log: its INFO and WARNING
lines (oneDNN, CPU features, "Could not find cuda drivers"), which TensorFlow 2.21 writes
before its logging reads ``TF_CPP_MIN_LOG_LEVEL``, so that the variable cannot hide them.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from typing import Callable, Union

_CUINIT = b"failed call to cuInit"
# TensorFlow's start-up log: absl's banner, INFO/WARNING lines ("I0000 00:00:17...
# 123 port.cc:153] ..."), and the second line of the CPU-features message
_STARTUP = re.compile(
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|[IW]\d{4} [\d:.]+ +\d+ [\w.-]+:\d+\] "
    rb"|To enable the following instructions: "
)
_done = False
_lock = threading.Lock()


def _driver_loadable() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _stderr_without(marker: Union[bytes, Callable[[bytes], bool]]):
    """File descriptor 2 into a temporary file while the block runs (TensorFlow's C++ log
    writes there, below Python), then its lines back, except those holding ``marker``
    (or, a function, those it is true for)."""
    drop = marker if callable(marker) else (lambda line: marker in line)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = b"".join(ln for ln in tmp.read().splitlines(True) if not drop(ln))
            if kept:
                os.write(2, kept)


def quiet_devices() -> None:
    """Initialize TensorFlow's devices without the cuInit line, if TensorFlow is imported
    and no GPU driver is present; once per process, and a no-op otherwise (it never
    imports TensorFlow: that costs seconds)."""
    global _done
    if _done or "tensorflow" not in sys.modules:
        return
    with _lock:
        if _done:
            return
        _done = True
        if sys.platform != "linux" or _driver_loadable():
            return
        tf = sys.modules["tensorflow"]
        try:
            with _stderr_without(_CUINIT):
                tf.config.list_physical_devices()
        except Exception:  # a broken install: the user's own first op will say so
            pass


def tensorflow():
    """``import tensorflow``, its devices initialized without the cuInit line."""
    import tensorflow as tf

    quiet_devices()
    return tf


def startup_noise(line: bytes, no_driver: bool) -> bool:
    """Whether ``line`` is TensorFlow's start-up log (or, ``no_driver``, the cuInit line)."""
    return bool(_STARTUP.match(line)) or (no_driver and _CUINIT in line)


def quiet_import():
    """``import tensorflow`` and its devices initialized, without its start-up log (see
    the module docstring) or, with no GPU driver, the cuInit line; its other output (an
    error) is kept.  For tar2tf's own commands: a library user's TensorFlow log is theirs."""
    global _done
    if "tensorflow" in sys.modules:
        return tensorflow()
    no_driver = sys.platform != "linux" or not _driver_loadable()
    with _lock, _stderr_without(lambda line: startup_noise(line, no_driver)):
        import tensorflow as tf

        if not _done:
            _done = True
            try:
                tf.config.list_physical_devices()
            except Exception:  # a broken install: the first op will say so
                pass
    return tf
