"""The command line's building blocks, shared by ``launch.cli`` and every module that
defines options (the ``cmd_*`` subcommands, ``store_args``, ``local_paths``, the Beam
option check in ``runner_args``): the usage error, a parser that raises it, and argparse
types.  It imports nothing of tar2tf's at import time, so that none of those modules has to
import ``launch.cli``, which imports them.
"""

from __future__ import annotations

import argparse
from typing import Callable, Optional

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
