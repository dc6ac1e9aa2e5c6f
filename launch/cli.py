"""tar2tf: WebDataset tar shards (local, ais://, gs://, s3://, https://) to TFRecords and PCR.

Exit status (all subcommands; launch/job_exit.py):
  0  success (rejects within --max-rejects; a failed clean-up after a complete output warns)
  1  the job failed while running (full disk, permissions, unreachable server, an error
     inside the job, Ctrl-C); the one line says what and where
  2  bad usage, options or configuration, found before anything was written
  3  the job finished but rejects exceeded --max-rejects (see the rejects file)
  4  output already exists and neither --overwrite nor --resume was given
  5  verification found a mismatch (``tar2tf verify``)
Every failure is one line, ``tar2tf <command>: <what> (<where>)``; --debug adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from typing import Callable, List, Optional

from launch import beam_service_log, job_server_log

SUBCOMMANDS = ("convert", "pcr", "pcr_report", "verify", "inspect")


class UsageError(ValueError):
    """Bad usage or options (exit status 2), said in one line; a ValueError so that
    :func:`launch.job_exit.run_job` maps it to 2 as well."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is a :class:`UsageError` for :func:`main` to print as one
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


def positive_float(text: str) -> float:
    """argparse type: seconds and the like, where 0 or less makes no sense."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
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


def build_parser() -> argparse.ArgumentParser:
    """One subcommand per ``launch/cmd_<name>.py`` module named in SUBCOMMANDS."""
    parser = Parser(
        prog="tar2tf",
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--debug", action="store_true", help="print the traceback of a failure above its line"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    parser.subcommands = sub.choices  # name -> its parser: main checks leftovers against its flags
    for name in SUBCOMMANDS:
        module = f"launch.cmd_{name}"
        if importlib.util.find_spec(module) is None:
            continue
        importlib.import_module(module).register(sub)
    for p in set(sub.choices.values()):
        # also after the subcommand; SUPPRESS: a subcommand's default must not reset a
        # --debug given before it
        p.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print the traceback of a failure above its line",
        )
    return parser


def check_runner_args(extra: List[str], tar2tf_flags) -> None:
    """Raise :class:`UsageError` for leftover flags that no driver would honour: flags
    neither tar2tf's nor Beam's (Beam would only log them and run without them), and,
    with ``--runner local``, Beam options (the in-process driver would ignore them; with
    no ``--runner``, a Beam option makes the job a Beam job instead).  ``--runner local``
    alone imports no Beam (that costs seconds)."""
    from pipelines.beam.options import beam_only, names_in_process

    rest = beam_only(extra) if names_in_process(extra) else extra
    if not rest:
        return
    from launch.runner_args import check_beam_args

    check_beam_args(extra, tar2tf_flags=tar2tf_flags)
    if rest is not extra:
        raise UsageError(
            f"tar2tf: {' '.join(rest)}: Beam pipeline option(s), which --runner local (the "
            "in-process driver) does not take; drop --runner local to run Beam "
            "(--runner beam: its local runner)"
        )


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        from launch import log_redact

        log_redact.install()  # no credentials, no terminal escapes in any log line
        job_server_log.show()  # a Flink job server's own log records, at their Java level
        beam_service_log.quiet()  # not Beam's "Really starting service" chatter (unless -v)
        if extra and not getattr(args, "accepts_beam_args", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if extra:
            check_runner_args(extra, parser.subcommands[args.command]._option_string_actions)
    except UsageError as e:
        from transforms.redact import one_line

        print(one_line(str(e)), file=sys.stderr)  # it may quote an argument: no escapes, no secrets
        return 2
    args.beam_args = extra
    from launch import job_exit
    from pipelines.job import phase as job_phase

    job_phase.reset()
    from launch import flink_watch
    from launch.log_redact import quiet_step_failures

    try:
        # a Flink cluster's job id and web UI
        with quiet_step_failures(args.debug), flink_watch.watching(extra):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("tar2tf: interrupted", file=sys.stderr)
        return 1
    except Exception as e:
        return job_exit.exit_code(args.command, e, debug=args.debug)


if __name__ == "__main__":
    # `python -m launch.cli`: run the importable module's main, not this __main__ copy, so
    # that its classes (UsageError, raised by launch.runner_args and the subcommands, which
    # import launch.cli) are the ones main catches
    from launch import cli

    sys.exit(cli.main())
