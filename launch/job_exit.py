"""The CLI's side of the exit-code contract: a subcommand's outcome said on stderr, and
the one table of what each code means (:data:`MEANINGS`: ``tar2tf --help`` prints it, and
a test holds the exit-code table of docs/cli.md to it).

The codes and what maps a job's totals and errors to them are ``pipelines.job.exits``;
a usage error of the command line is the CLI's own (:class:`launch.args.UsageError`).
Here, on failure, one line ``tar2tf <command>: <what> (<where>)``, redacted (no credentials) and
escaped for a terminal (``transforms.redact``), a traceback above it only with
``--debug``.  The CLI (``launch.cli.main``) calls :func:`exit_code` for every subcommand.
"""

from __future__ import annotations

import sys
import traceback
from typing import Optional

from launch.args import UsageError
from pipelines.job import exits
from transforms.redact import one_line, redact

# (code, meaning) in docs/cli.md's Markdown; every subcommand's codes
MEANINGS = (
    (
        exits.OK,
        "success (rejects within `--max-rejects`); a failed clean-up after a complete output"
        " is a warning",
    ),
    (
        exits.FAILED,
        "the job failed while running: full disk, permission, unreachable server, any error"
        " inside the job; also Ctrl-C (`tar2tf: interrupted`)",
    ),
    (
        exits.USAGE,
        "bad usage, options or configuration, found before anything is written (no input"
        " found, an output that would overwrite an input, unusable credentials)",
    ),
    (
        exits.REJECTS,
        "the job finished, but rejects exceeded `--max-rejects`, or it wrote nothing (every"
        " record rejected)",
    ),
    (
        exits.EXISTS,
        "the output exists and `--overwrite` was not given (or `--resume` found no"
        " interrupted run of this job), or another job is writing the output",
    ),
    (exits.MISMATCH, "`tar2tf verify` found a mismatch"),
)


def line(command: str, what: str, where: str = "") -> str:
    """``tar2tf <command>: <what> (<where>)``, redacted and escaped for a terminal."""
    text = f"tar2tf {command}: {what}" + (f" ({where})" if where and str(where) not in what else "")
    return one_line(text)


def exit_code(
    command: str, exc: BaseException, debug: bool = False, started: Optional[bool] = None
) -> int:
    """Print the failure (its traceback first with ``debug``) and return its exit code.
    ``started``: whether the job had begun to write (default: what the exception says,
    ``pipelines.job.exits.started``)."""
    if isinstance(exc, UsageError):
        code, what, where = exits.USAGE, one_line(str(exc)), ""
    else:
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
