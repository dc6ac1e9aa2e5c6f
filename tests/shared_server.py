"""One server process per test session, even when several test modules import the same
fixture (pytest then makes one session fixture per module): the first user starts it, the
last one stops it, by the PIDs it started."""

import contextlib
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


class SharedServer:
    def __init__(self):
        self.server = None
        self.users = 0

    @contextlib.contextmanager
    def use(self, make):
        """``make()`` builds a server with ``start()``/``stop()``; yields the running one."""
        if self.server is None:
            server = make()
            try:
                server.start()
            except Exception:
                server.stop()
                raise
            self.server = server
        self.users += 1
        try:
            yield self.server
        finally:
            self.users -= 1
            if self.users == 0:
                self.server.stop()
                self.server = None


def serve_or_skip(shared: SharedServer, binary, skip_reason: str, make):
    """The body of a session fixture: skip loudly without a ``binary``, else yield the
    server ``make(binary)`` shared by every module's copy of the fixture."""
    if binary is None:
        import pytest

        pytest.skip(skip_reason)
    with shared.use(lambda: make(binary)) as server:
        yield server
