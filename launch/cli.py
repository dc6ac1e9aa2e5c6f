"""tar2tf: WebDataset tar shards (local, ais://, gs://, s3://, https://) to TFRecords and PCR.

Every failure is one line, ``tar2tf <command>: <what> (<where>)``; --debug adds the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import logging
import signal
import sys
from typing import List, Optional

from launch import beam_service_log, job_server_log
from launch.args import Parser, UsageError, did_you_mean, known_args, plain
from launch.runner_args import check_beam_args

SUBCOMMANDS = ("convert", "pcr", "pcr_report", "verify", "inspect")


def _exit_status() -> str:
    """The exit codes for ``--help``, from the one table of them (launch/job_exit.py)."""
    import textwrap

    from launch.job_exit import MEANINGS

    lines = ["Exit status (all subcommands):"]
    for code, meaning in MEANINGS:
        text = textwrap.wrap(meaning.replace("`", ""), 84)
        lines += [f"  {code}  {text[0]}"] + [f"     {t}" for t in text[1:]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """One subcommand per ``launch/cmd_<name>.py`` module named in SUBCOMMANDS."""
    parser = Parser(
        prog="tar2tf",
        description=__doc__.split("\n")[0],
        epilog=_exit_status() + "\n\n" + plain(__doc__.split("\n", 2)[2]),
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
    with ``--runner inprocess``, Beam options (the in-process driver would ignore them; with
    no ``--runner``, a Beam option makes the job a Beam job instead).  ``--runner inprocess``
    alone imports no Beam (that costs seconds)."""
    from pipelines.beam.options import beam_only, names_in_process, runner_name

    rest = beam_only(extra) if names_in_process(extra) else extra
    if not rest:
        return
    check_beam_args(extra, tar2tf_flags=tar2tf_flags)
    if rest is not extra:
        named = f"--runner {runner_name(extra)}"  # as the user spelt it: inprocess or local
        raise UsageError(
            f"tar2tf: {' '.join(rest)}: Beam pipeline option(s), which {named} (the "
            f"in-process driver) does not take; drop {named} to run Beam "
            "(--runner beam: its local runner)"
        )


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    try:
        args, extra = known_args(parser, argv)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        from launch import log_redact

        log_redact.install()  # no credentials, no terminal escapes in any log line
        job_server_log.show()  # a Flink job server's own log records, at their Java level
        beam_service_log.quiet()  # not Beam's "Really starting service" chatter (unless -v)
        if extra and not getattr(args, "accepts_beam_args", False):
            flags = parser.subcommands[args.command]._option_string_actions
            hint = did_you_mean(extra, flags)
            parser.error(
                f"unrecognized arguments: {' '.join(extra)}" + (f" ({hint})" if hint else "")
            )
        if extra:
            check_runner_args(extra, parser.subcommands[args.command]._option_string_actions)
    except UsageError as e:
        from transforms.redact import one_line

        print(one_line(str(e)), file=sys.stderr)  # it may quote an argument: no escapes, no secrets
        return 2
    args.beam_args = extra
    from launch import flink_watch, job_exit
    from launch.log_redact import quiet_step_failures

    try:
        # a Flink cluster's job id and web UI
        with quiet_step_failures(args.debug), flink_watch.watching(extra), _terminated():
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("tar2tf: interrupted", file=sys.stderr)
        return 1
    except Exception as e:
        return job_exit.exit_code(args.command, e, debug=args.debug)


@contextlib.contextmanager
def _terminated():
    """SIGTERM (a scheduler's stop, ``kill``) ends the job as Ctrl-C does: the runner's job
    cancelled, the partial files removed, the output's lock released -- rather than a
    launcher gone without a word, and a job on a cluster writing on without its lock."""

    def stop(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (the CLI called from a thread): as it was
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())
