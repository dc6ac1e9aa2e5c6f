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
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading

_CUINIT = b"failed call to cuInit"
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
def _stderr_without(marker: bytes):
    """File descriptor 2 into a temporary file while the block runs (TensorFlow's C++ log
    writes there, below Python), then its lines back, except those holding ``marker``."""
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
            kept = b"".join(ln for ln in tmp.read().splitlines(True) if marker not in ln)
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
