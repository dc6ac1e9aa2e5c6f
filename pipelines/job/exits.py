"""Exit codes: the one place that maps a job's totals and its errors to them.  What each
code means to a user, in the CLI's words, is the CLI's table (``launch.job_exit.MEANINGS``).

A finished job's code comes from its totals (:func:`of_totals`; :func:`rejects_said`
words a 3).  A failed job's comes from its exception (:func:`classify`), classified by
the most telling one in its chain (``__cause__`` / ``__context__``): a full disk under a
runner's wrapping is a full disk.  A ``ValueError`` is bad usage (2) only while the job
is being set up -- its options, inputs and outputs are checked then, and a bad one is the
user's to fix; the same type raised once the job writes (in a worker, an op, a store's
client) is a failure of the job (1).  The lifecycle marks the exceptions of a job that
had started (:func:`mark_started`); :func:`classify` reads the mark (:func:`started`).
``launch.job_exit`` prints what this module decides.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Callable, Dict, Iterator, Optional, Tuple

from pipelines.job.refused import OutputExistsError

OK, FAILED, USAGE, REJECTS, EXISTS, MISMATCH = 0, 1, 2, 3, 4, 5
MAX_LINE = 2000  # characters of an exception's message kept in the line (an SDK's may run on)
_FULL = re.compile(r"No space left on device|Disk quota exceeded")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _first(exc: BaseException, test: Callable[[BaseException], bool]) -> Optional[BaseException]:
    return next((e for e in _chain(exc) if test(e)), None)


def _is(e: BaseException, module: str, name: str) -> bool:
    """``e`` is an instance of ``module.name`` (looked up by name along its MRO: the
    module need not be importable, nor imported here)."""
    return any(c.__module__.startswith(module) and c.__name__ == name for c in type(e).__mro__)


def _message(e: BaseException) -> str:
    """An exception's message as one short line: whitespace collapsed, Beam's
    "[while running ...]" step names dropped, cut at :data:`MAX_LINE`."""
    args = getattr(e, "args", ())
    # ("message", detail) exceptions (google.auth's) print as a tuple: the message says it
    text = str(e)
    if len(args) > 1 and isinstance(args[0], str) and text.startswith("("):
        text = args[0]
    text = text.strip() or type(e).__name__
    text = re.sub(r"\s*\[while running '[^']*'\]", "", text).strip()
    if "Traceback (most recent call last)" in text:
        # a runner's message holding the worker's traceback as text: its last line says it
        text = [ln for ln in text.splitlines() if ln.strip()][-1]
    else:
        text = text.split("\nTraceback (most recent call last)", 1)[0]
    first = " ".join(text.split())
    if len(first) > MAX_LINE:
        first = first[: MAX_LINE - 3] + "..."
    return first


def _where_of_connection(e: BaseException) -> str:
    """``scheme://host:port`` a requests/urllib3 connection error was about."""
    req = getattr(e, "request", None)
    url = getattr(req, "url", None)
    if isinstance(url, str):
        m = re.match(r"([a-z]+://[^/]+)", url)
        if m:
            return m.group(1)
    m = re.search(r"host='([^']+)', port=(\d+)", str(e))
    return f"{m.group(1)}:{m.group(2)}" if m else ""


def _reason_of_connection(e: BaseException) -> str:
    text = str(e)
    for pat in (
        r"\[Errno -?\d+\] ([^'\")]+)",
        r"(Connection refused|Name or service not known|timed out|"
        r"Temporary failure in name resolution|No route to host|Connection reset by peer)",
    ):
        m = re.search(pat, text)
        if m:
            return m.group(1).strip()
    return "connection failed"


def classify(exc: BaseException, began: Optional[bool] = None) -> Tuple[int, str, str]:
    """``(exit code, what, where)`` for an exception that ended a subcommand;
    ``began``: whether the job had begun to write (default: :func:`started`)."""
    if began is None:
        began = started(exc)
    if isinstance(exc, KeyboardInterrupt):
        return FAILED, "interrupted", ""
    if isinstance(exc, OutputExistsError):
        return EXISTS, _message(exc), ""
    full = _first(exc, lambda e: isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
    if full is not None:
        return FAILED, os.strerror(full.errno).lower(), full.filename or ""
    said = _first(exc, lambda e: _FULL.search(str(e)) is not None)
    if said is not None:  # a runner re-raised it as text (Beam: OSError(message) has no errno)
        return FAILED, _FULL.search(str(said)).group(0).lower(), ""
    creds = _first(
        exc,
        lambda e: (
            _is(e, "google.auth", "GoogleAuthError")
            or _is(e, "google.auth", "DefaultCredentialsError")
        ),
    )
    if creds is not None:
        where = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
        return USAGE, f"unusable Google Cloud credentials: {_message(creds)}", where
    conn = _first(
        exc,
        lambda e: (
            _is(e, "requests", "ConnectionError")
            or _is(e, "urllib3", "NewConnectionError")
            or _is(e, "urllib3", "MaxRetryError")
        ),
    )
    if conn is not None:
        return FAILED, f"cannot connect: {_reason_of_connection(conn)}", _where_of_connection(conn)
    perm = _first(exc, lambda e: isinstance(e, PermissionError))
    if perm is not None:
        return FAILED, f"{perm.strerror or 'permission denied'}".lower(), perm.filename or ""
    if isinstance(exc, (ValueError, ImportError)):  # ImportError: a module:function named in --ops
        return (FAILED if began else USAGE), _message(exc), ""
    if isinstance(exc, OSError) and exc.strerror:
        return FAILED, exc.strerror, exc.filename or ""
    if isinstance(exc, RuntimeError):
        return FAILED, _message(exc), ""
    return FAILED, f"{type(exc).__name__}: {_message(exc)}", ""


def of_totals(totals: Dict[str, int], rejected: int, max_rejects: int) -> int:
    """A finished job's code: 3 when rejects exceed ``max_rejects``, or when the job wrote
    nothing because everything it read was rejected (within ``max_rejects`` or not): an
    empty output is no success.  Else 0."""
    if rejected > max_rejects:
        return REJECTS
    return REJECTS if rejected and not totals.get("records_written", 0) else OK


def rejects_said(code: int, rejected: int, max_rejects: int, option: str) -> Optional[str]:
    """Why a finished job's code is 3 (``option``: ``max_rejects`` as the caller spells
    it), or None when it is not."""
    if code != REJECTS:
        return None
    if rejected <= max_rejects:
        return f"nothing written: every record read was rejected ({rejected} rejects)"
    return f"{rejected} rejects > {option} {max_rejects}"


# -- the phase of a failed job -----------------------------------------------------------


def mark_started(exc: BaseException) -> None:
    """``exc`` ended a job that had started writing (``pipelines.job.lifecycle.run``).
    The mark travels with the exception, not in this process's state: two jobs of one
    process (a notebook, a test run) never see each other's phase."""
    try:
        exc.tar2tf_started = True
    except AttributeError:  # an exception type with __slots__: left unmarked (a failure)
        pass


def started(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) ended a started job."""
    return any(getattr(e, "tar2tf_started", False) for e in _chain(exc))
