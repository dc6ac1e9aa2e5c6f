"""The CLI's side of the exit-code contract: a subcommand's outcome said on stderr.

The codes and what maps to them are ``pipelines.job.exits`` (its table); here, on
failure, one line ``tar2tf <command>: <what> (<where>)``, redacted (no credentials) and
escaped for a terminal (``transforms.redact``), a traceback above it only with
``--debug``.  The CLI (``launch.cli.main``) calls :func:`exit_code` for every subcommand.
"""

from __future__ import annotations

import sys
import traceback
from typing import Optional

from pipelines.job import exits
from transforms.redact import one_line, redact


def line(command: str, what: str, where: str = "") -> str:
    """``tar2tf <command>: <what> (<where>)``, redacted and escaped for a terminal."""
    text = f"tar2tf {command}: {what}" + (f" ({where})" if where and str(where) not in what else "")
    return one_line(text)


def exit_code(
    command: str, exc: BaseException, debug: bool = False, started: Optional[bool] = None
) -> int:
    """Print the failure (its traceback first with ``debug``) and return its exit code."""
    if started is None:
        started = exits.started()
    code, what, where = exits.classify(exc, started)
    held = getattr(exc, "tar2tf_held", "")
    if held:  # verified work a failed job kept (pipelines.job.cleanup)
        what = f"{what}; {held} (rerun with --resume to use it, or delete it)"
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


def rejects_exit(command: str, res, max_rejects: int) -> int:
    """The result's exit code, saying why when it is 3 (``pipelines.job.exits``)."""
    why = exits.rejects_said(
        res.exit_code, res.manifest["rejects"]["count"], max_rejects, "--max-rejects"
    )
    if why is not None:
        print(f"tar2tf {command}: {why}", file=sys.stderr)
    return res.exit_code
