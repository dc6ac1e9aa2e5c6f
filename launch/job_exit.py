"""The exit-code contract: how any subcommand's outcome becomes an exit code and, on
failure, one line ``tar2tf <command>: <what> (<where>)`` on stderr.

====  ===========================================================================
code  meaning
====  ===========================================================================
0     success (rejects within ``--max-rejects``; a failed clean-up of the work
      directory after a complete output is a warning)
1     the job failed while running: an I/O error (a full disk, a permission), an
      unreachable server, an error raised inside the job (also a ``ValueError``),
      Ctrl-C
2     bad usage, options or configuration, found before the job wrote anything
      (a misspelt flag, an output that would overwrite an input, unusable
      credentials)
3     the job finished, but rejects exceeded ``--max-rejects`` (see the rejects file)
4     output already exists and neither ``--overwrite`` nor ``--resume`` was given
5     ``tar2tf verify`` found a mismatch
====  ===========================================================================

:func:`exit_code` is the one place that maps an exception to its code and line; the CLI
(``launch.cli.main``) calls it for every subcommand.  The line is redacted (no
credentials) and escaped for a terminal (``transforms.redact``).  A traceback is printed
above it only with ``--debug``.  Exceptions are classified by the most telling one in
their chain (``__cause__`` / ``__context__``): a full disk under a runner's wrapping is a
full disk.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import traceback
from typing import Any, Callable, Iterator, Optional, Tuple

from transforms.redact import one_line, redact

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


def classify(exc: BaseException, started: bool = True) -> Tuple[int, str, str]:
    """``(exit code, what, where)`` for an exception that ended a subcommand;
    ``started``: whether the job had begun to write (``pipelines.job.phase``)."""
    from launch.args import UsageError

    if isinstance(exc, KeyboardInterrupt):
        return FAILED, "interrupted", ""
    if isinstance(exc, UsageError):
        return USAGE, _message(exc), ""
    if _is(exc, "pipelines", "OutputExistsError"):
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
        return (FAILED if started else USAGE), _message(exc), ""
    if isinstance(exc, OSError) and exc.strerror:
        return FAILED, exc.strerror, exc.filename or ""
    if isinstance(exc, RuntimeError):
        return FAILED, _message(exc), ""
    return FAILED, f"{type(exc).__name__}: {_message(exc)}", ""


def line(command: str, what: str, where: str = "") -> str:
    """``tar2tf <command>: <what> (<where>)``, redacted and escaped for a terminal."""
    text = f"tar2tf {command}: {what}" + (f" ({where})" if where and str(where) not in what else "")
    return one_line(text)


def exit_code(
    command: str, exc: BaseException, debug: bool = False, started: Optional[bool] = None
) -> int:
    """Print the failure (its traceback first with ``debug``) and return its exit code."""
    if started is None:
        from pipelines.job import phase as job_phase

        started = job_phase.started()
    code, what, where = classify(exc, started)
    held = getattr(exc, "tar2tf_held", "")
    if held:
        what = f"{what}; {held}"
    if debug:
        sys.stderr.write(
            redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        )
    if command == "" and what == "interrupted":
        print("tar2tf: interrupted", file=sys.stderr)
    else:
        print(line(command, what, str(where)), file=sys.stderr)
    sys.stderr.flush()
    return code


def run_job(command: str, job: Callable[[], Any], debug: bool = False) -> Tuple[Optional[Any], int]:
    """``(job(), 0)``, or ``(None, exit code)`` once the failure is said (:func:`exit_code`);
    Ctrl-C is left to the caller."""
    from pipelines.job import phase as job_phase

    job_phase.reset()  # a job of its own: set-up errors are usage errors again
    try:
        return job(), 0
    except KeyboardInterrupt:
        raise
    except Exception as e:
        return None, exit_code(command, e, debug)


def rejects_exit(command: str, res, max_rejects: int) -> int:
    """The result's exit code, saying why when it is 3 (too many rejects)."""
    count = res.manifest["rejects"]["count"]
    if res.exit_code == 3 and count <= max_rejects:
        print(
            f"tar2tf {command}: nothing written: every record read was rejected ({count} rejects)",
            file=sys.stderr,
        )
    elif res.exit_code == 3:
        print(f"tar2tf {command}: {count} rejects > --max-rejects {max_rejects}", file=sys.stderr)
    return res.exit_code
