"""The command line's building blocks, shared by ``launch.cli`` and every module that
defines options (the ``cmd_*`` subcommands, ``store_args``, ``local_paths``, the Beam
option check in ``runner_args``): the usage error, a parser that raises it, and argparse
types.  It imports nothing of tar2tf's at import time, so that none of those modules has to
import ``launch.cli``, which imports them.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Callable, Iterable, List, Optional

# how the options a job's refusal names (pipelines.job.refused) are spelt on the command line
CLI_WORDS = {"overwrite": "--overwrite", "resume": "--resume"}


class UsageError(ValueError):
    """Bad usage or options (exit status 2), said in one line; a ValueError so that
    ``launch.job_exit`` maps it to 2 as well."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is a :class:`UsageError` for ``launch.cli.main`` to print as one
    ``tar2tf ...:`` line: argparse would print the whole usage (a screenful for convert)
    above it and exit, and the caller could not tell a usage error from a finished job.
    Subcommand parsers are made of the same class (add_subparsers' default)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")

    def _check_value(self, action, value):
        # argparse's own check, with a "did you mean" for a misspelt choice or subcommand
        # (argparse suggests only from Python 3.14 on, with suggest_on_error)
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
            hint = f", did you mean {close[0]!r}?" if close else ""
            raise argparse.ArgumentError(
                action,
                f"invalid choice: {value!r}{hint} (choose from {', '.join(map(repr, choices))})",
            )
        super()._check_value(action, value)


def add_runner_arg(p: argparse.ArgumentParser, default: str) -> None:
    """``--runner`` in the subcommand's ``--help``; :func:`known_args` hands it on with the
    Beam options, whose driver choice (pipelines.beam.options) and runners read it."""
    p.add_argument(
        "--runner",
        metavar="NAME",
        default=None,
        help=f"where the job runs: inprocess ({default}; 'local' is an alias), beam (Beam's "
        "local runner, one worker "
        "process per core), or a Beam runner: FlinkRunner, DataflowRunner, PortableRunner "
        "... with its pipeline options (docs/runners.md)",
    )


def known_args(parser: argparse.ArgumentParser, argv: Optional[List[str]] = None):
    """``parser.parse_known_args(argv)``, with a ``--runner`` the subcommand parsed put back
    first among the leftover (Beam) arguments."""
    args, extra = parser.parse_known_args(argv)
    runner = getattr(args, "runner", None)
    if runner is not None:
        extra = ["--runner", runner, *extra]
    return args, extra


def _flag_key(flag: str) -> str:
    return flag.split("=", 1)[0].replace("_", "-").lower()


def close_flag(flag: str, candidates: Iterable[str]) -> Optional[str]:
    """The long flag of ``candidates`` closest to a misspelt ``flag`` (``--max-shard-szie``
    -> ``--max-shard-size``; ``_`` and ``-`` alike, ``--x=v`` by its name), or None.
    Earlier candidates win a tie: pass tar2tf's flags before Beam's."""
    keys: dict = {}
    for c in candidates:
        if c.startswith("--"):
            keys.setdefault(_flag_key(c), c)
    close = difflib.get_close_matches(_flag_key(flag), list(keys), n=1, cutoff=0.8)
    return keys[close[0]] if close else None


def did_you_mean(unknown: List[str], candidates: Iterable[str]) -> str:
    """``"did you mean --x?"`` for the flags among ``unknown`` (leftover arguments) that are
    close to one of ``candidates``; "" when none is."""
    candidates = list(candidates)
    found: List[str] = []
    for word in unknown:
        if word.startswith("--"):
            close = close_flag(word, candidates)
            if close and close not in found:
                found.append(close)
    return f"did you mean {', '.join(found)}?" if found else ""


def plain(text: str) -> str:
    """A docstring as ``--help`` shows it: no reStructuredText markup (````x````,
    ``:func:`x```` -> ``x``)."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def int_in(lo: int, hi: Optional[int] = None) -> Callable[[str], int]:
    """argparse type: an integer in ``lo..hi``, so that a count which makes no sense
    (``--max-rejects -1``, ``--records-per-shard 0``) is a usage error before any job
    starts, not a job that fails or ends in a confusing exit status."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if n < lo or (hi is not None and n > hi):
            raise argparse.ArgumentTypeError(
                f"must be {lo}..{hi}, got {n}" if hi is not None else f"must be >= {lo}, got {n}"
            )
        return n

    return parse


def seconds(text: str) -> float:
    """argparse type: a duration in seconds (timeouts, backoffs), more than 0 (no wait
    makes no sense) and finite, at most :data:`transforms.stores.base.MAX_SECONDS`: ``inf``
    or ``1e10`` would be taken, then overflow the clock arithmetic of every read."""
    from transforms.stores.base import MAX_SECONDS

    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if x <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    if not x <= MAX_SECONDS:  # inf, nan
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds, at most {MAX_SECONDS} (7 days), got {text}"
        )
    return x


def size(text: str) -> str:
    """argparse type: a byte size (``500MB``, ``2GiB``, a number; transforms/sizes.py),
    checked here and kept as given."""
    from transforms.sizes import parse_size

    try:
        parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text
