"""Server processes for a test session.  The fixture modules that start them are registered
once, in the root conftest's ``pytest_plugins``, so each session fixture exists once and
its server starts at most once per session; it is stopped by the PIDs started here."""

import os
import signal
import subprocess


def stop_process(proc, sig=signal.SIGTERM, timeout: float = 10.0) -> None:
    """Stop a server started here, by its PID: ``sig``, then SIGKILL if it outlives
    ``timeout`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


def serve(server):
    """The body of a session fixture: start ``server`` (with ``start()``/``stop()``), yield
    it, stop it at the end of the session (also when it failed to start)."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


def serve_or_skip(binary, skip_reason: str, make):
    """Skip loudly without a ``binary``, else serve ``make(binary)``."""
    if binary is None:
        import pytest

        pytest.skip(skip_reason)
    yield from serve(make(binary))
