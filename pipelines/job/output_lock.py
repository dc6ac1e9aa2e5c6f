"""One job per output: a lock object beside the output, created only if absent.

A job takes the lock before it looks at its output (``pipelines.job.lifecycle.prepare``,
for either kind of job) and gives it back at its end, whether it succeeded or failed.  The
lock is a small JSON object -- who holds it (host, pid and the pid's start time), when the job
started, and a heartbeat the job rewrites every :data:`HEARTBEAT_S` seconds -- created
with the store's create-if-absent (``transforms.stores.exclusive``), so two jobs cannot
both create it.  A second job on the output is refused (:class:`OutputLockedError`, exit
4) with one line naming the running job.

A lock whose job is dead is taken over (so ``--resume`` / ``--overwrite`` work after a
``kill -9``):

* on the same host: its pid no longer runs, or runs a process started at another time
  (the pid was reused); or it names this very process (an earlier job of a program that
  runs jobs one after another: two jobs of one process on one output at once are not
  told apart);
* from another host: its heartbeat is older than :data:`STALE_AFTER_S` (the clocks of
  the two hosts are trusted to within a fraction of that).

Taking over deletes the stale lock only if it is unchanged, then creates a new one: two
jobs taking over at once cannot both win (on AIS, see ``transforms.stores.exclusive``).
A job whose lock was taken by another fails (exit 4) instead of claiming an output that
may mix two jobs': its heartbeat finds another job's token (:meth:`OutputLock.check`), and
the job reads the lock again before its commit point (:func:`check_held`).

If a job's lock is not released explicitly (an exception between set-up and the step
that releases it), it is released when the lock object is collected or at interpreter
exit (``weakref.finalize``).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
import weakref
from typing import Any, Dict, Optional

from pipelines.job.refused import OutputExistsError
from transforms.stores import StoreConfig, exclusive, join, split_url

log = logging.getLogger("tar2tf")
SUFFIX = ".tar2tf-lock"  # a TFRecord output's lock: beside its manifest
NAME = ".tar2tf-lock"  # a PCR output's lock: in its directory
HEARTBEAT_S = 30.0
STALE_AFTER_S = 300.0
KIND = "tar2tf-output-lock"


class OutputLockedError(OutputExistsError):
    """Another job is writing the output (exit 4, like an existing output)."""


def lock_url_for(output: str) -> str:
    """The lock of a TFRecord output (template or single file): beside its manifest."""
    from pipelines.job import names

    return names.companion(output, SUFFIX)


def pcr_lock_url(output_dir: str) -> str:
    return join(output_dir, NAME)


def _proc_start(pid: int) -> Optional[str]:
    """When ``pid`` started (clock ticks since boot, Linux), to tell a reused pid; None
    where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return stat.rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: Optional[str]) -> bool:
    if pid <= 0:
        # no job has such a pid: os.kill(0 or -1, 0) signals a process group or every
        # process, and would say "alive" for a lock no job holds
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    except (OverflowError, ValueError):
        return False
    now = _proc_start(pid)
    return not (start and now and now != start)


def _iso(t: Any) -> str:
    """``t`` as a UTC time, or ``?`` where it is no time (a lock someone edited: NaN,
    1e20, text): the line naming the lock's job must not fail on it."""
    if not isinstance(t, (int, float)) or not math.isfinite(t):
        return "?"
    try:
        when = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    except (OverflowError, ValueError, OSError):
        return "?"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(info: Dict[str, Any]) -> str:
    """The running job a lock names, for the refusal line."""
    when = _iso(info.get("started"))
    cmd = info.get("command") or "job"
    return f"tar2tf {cmd} pid {info.get('pid')} on host {info.get('host')}, started {when}"


def stale_reason(info: Dict[str, Any], now: Optional[float] = None) -> Optional[str]:
    """Why the lock's job is dead, or None if it may be running."""
    now = time.time() if now is None else now
    pid = info.get("pid")
    if info.get("host") == socket.gethostname() and isinstance(pid, int):
        if pid == os.getpid() and info.get("pid_start") == _proc_start(pid):
            # an earlier job of this process whose lock was not yet collected (it failed
            # before the step that releases it, and its traceback is still referenced)
            return "an earlier job of this process"
        if not _alive(pid, info.get("pid_start")):
            return f"pid {pid} is not running"
        return None
    beat = info.get("heartbeat")
    # a heartbeat that is no finite time (NaN, inf: an edited lock) says nothing: the job
    # may be running
    if isinstance(beat, (int, float)) and math.isfinite(beat) and now - beat > STALE_AFTER_S:
        return f"no heartbeat for {int(now - beat)} s"
    return None


class OutputLock:
    """A lock this process holds (see the module docstring)."""

    def __init__(self, url: str, config: Optional[StoreConfig], info: Dict[str, Any], version):
        self.url, self.config, self.info = url, config, info
        self.lost: Optional[str] = None
        # the mutex keeps a heartbeat's rewrite and the release apart (a release that read
        # the version a beat is replacing would find the lock "changed" and leave it)
        state = {"version": version, "pid": os.getpid(), "mutex": threading.Lock()}
        self._state = state
        self._stop = threading.Event()
        self._finalizer = weakref.finalize(self, _release, url, config, state, self._stop)
        t = threading.Thread(
            target=_beat, args=(weakref.ref(self), self._stop), name="tar2tf-lock", daemon=True
        )
        t.start()

    def release(self) -> None:
        """Delete the lock (once; later calls do nothing)."""
        self._finalizer()

    @property
    def token(self) -> str:
        return self.info["token"]

    def check(self) -> None:
        """Raise :class:`OutputLockedError` if another job took the lock while this one ran."""
        if self.lost:
            raise OutputLockedError(_lost(self.lost))


class NoLock:
    """An output on a store without a create-if-absent (Beam's other file systems): unlocked."""

    token = None

    def release(self) -> None:
        pass

    def check(self) -> None:
        pass


def _lost(other: str) -> str:
    return (
        f"another job took the lock on this output while this job ran ({other}); "
        f"its output may mix both jobs': run `tar2tf verify` on it, or run again"
    )


def check_held(url: str, token: Optional[str], config: Optional[StoreConfig] = None) -> None:
    """Raise :class:`OutputLockedError` unless the lock at ``url`` still holds ``token``
    (the job's: :attr:`OutputLock.token`; None: an unlocked output, nothing to check).

    The heartbeat notices a lost lock only every :data:`HEARTBEAT_S` seconds; a job reads
    the lock again right before its commit point, so that a job whose lock was deleted and
    taken by another never writes a manifest over the other's output.  Plain values only:
    a worker process calls it as well as the launching one."""
    if not token:
        return
    try:
        held = json.loads(exclusive.read(url, config)[0])
    except FileNotFoundError:
        other = "the lock is gone"
    except ValueError:
        other = "the lock is not a tar2tf lock now"
    else:
        if isinstance(held, dict) and held.get("token") == token:
            return
        ours = isinstance(held, dict) and held.get("kind") == KIND
        other = describe(held) if ours else "the lock is not a tar2tf lock now"
    raise OutputLockedError(_lost(other))


def _content(info: Dict[str, Any]) -> bytes:
    return (json.dumps(info, sort_keys=True) + "\n").encode()


def _release(url, config, state, stop) -> None:
    stop.set()
    if os.getpid() != state["pid"]:
        return  # a forked child exiting: the lock is its parent's
    try:
        with state["mutex"]:
            exclusive.delete(url, state["version"], config)
    except FileExistsError:
        pass  # another job's lock now: not ours to delete
    except Exception as e:  # the job's outcome stands; a stale lock is taken over later
        log.warning("could not remove the lock %s: %s", url, e)


def _beat(ref, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        lock = ref()
        if lock is None or lock.lost:
            return
        lock.info["heartbeat"] = time.time()
        try:
            with lock._state["mutex"]:
                if stop.is_set():
                    return
                lock._state["version"] = exclusive.replace(
                    lock.url, _content(lock.info), lock._state["version"], lock.config
                )
        except FileExistsError:
            try:
                other = describe(json.loads(exclusive.read(lock.url, lock.config)[0]))
            except Exception:
                other = "the lock is gone"
            lock.lost = other
            log.error("the lock on this job's output %s was taken: %s", lock.url, other)
            return
        except Exception as e:  # a transient store fault: the next beat tries again
            log.warning("could not refresh the lock %s: %s", lock.url, e)
        finally:
            del lock


def _not_a_lock(output: str, url: str) -> str:
    return (
        f"{output} is locked by {url}, which is not a tar2tf lock (or is being "
        f"written); if no job is writing this output, delete {url}"
    )


def _dangling_link(url: str) -> bool:
    """A local lock name that is a symbolic link to nothing."""
    if split_url(url)[0] != "":
        return False
    path = split_url(url)[2]
    return os.path.islink(path) and not os.path.exists(path)


def acquire(
    url: str, config: Optional[StoreConfig] = None, *, output: str, command: str
) -> "OutputLock | NoLock":
    """Take the lock at ``url`` for ``output``, taking over a dead job's; raise
    :class:`OutputLockedError` naming the running job if another holds it."""
    if split_url(url)[0] not in ("", "gs", "s3", "ais"):
        log.debug("no output lock on %s: the store has no create-if-absent", url)
        return NoLock()
    now = time.time()
    info = {
        "kind": KIND,
        "token": uuid.uuid4().hex,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": _proc_start(os.getpid()),
        "started": now,
        "heartbeat": now,
        "command": command,
        "output": output,
    }
    data = _content(info)
    for _ in range(3):
        try:
            return OutputLock(url, config, info, exclusive.create(url, data, config))
        except FileExistsError:
            pass
        try:
            raw, version = exclusive.read(url, config)
        except FileNotFoundError:
            if _dangling_link(url):
                # the name is taken (create fails) but reads as absent: no job holds it,
                # and trying again would fail the same way
                raise OutputLockedError(_not_a_lock(output, url)) from None
            continue  # released meanwhile: try again
        try:
            held = json.loads(raw)
            if not isinstance(held, dict) or held.get("kind") != KIND:
                raise ValueError
        except ValueError:
            raise OutputLockedError(_not_a_lock(output, url)) from None
        why = stale_reason(held)
        if why is None:
            raise OutputLockedError(
                f"another job is writing {output}: {describe(held)} (lock {url}); wait for "
                f"it to end, or delete the lock if that job is gone"
            )
        log.warning("taking over the lock of a job that ended (%s: %s)", describe(held), why)
        try:
            exclusive.delete(url, version, config)
        except FileExistsError:
            pass  # another job took it over first: the next round names it
    raise OutputLockedError(f"could not take the lock {url} on {output}: other jobs keep taking it")
