"""``--progress/--no-progress`` and ``--progress-every``, shared by ``convert`` and ``pcr``
(what they mean: pipelines/job/progress.py)."""

from __future__ import annotations

import argparse

from launch.args import seconds


def add_progress_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live progress on stderr (default): a bar on a terminal; in a log or a pipe, a "
        "line every --progress-every seconds (shards, records, rate, ETA), so a job "
        "shorter than that prints none; --no-progress: none",
    )
    p.add_argument(
        "--progress-every",
        type=seconds,
        metavar="SECONDS",
        help="seconds between progress lines where stderr is not a terminal (default 60)",
    )


def progress_options(args) -> dict:
    """The config's ``progress`` and ``progress_every`` from the parsed arguments."""
    return {"progress": args.progress, "progress_every": args.progress_every}
