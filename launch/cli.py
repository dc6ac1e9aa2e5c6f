"""tar2tf: WebDataset tar shards (local, ais://, gs://) to TFRecords and Progressive Compressed Records.

Exit status (all subcommands):
  0  success (rejects within --max-rejects)
  1  the job failed (an exception; the message says why)
  2  bad usage or options
  3  the job finished but rejects exceeded --max-rejects (see the rejects file)
  4  output already exists and --overwrite was not given
  5  verification found a mismatch (``tar2tf verify``)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from typing import List, Optional

SUBCOMMANDS = ("convert", "pcr", "pcr_report", "verify", "inspect")


def build_parser() -> argparse.ArgumentParser:
    """One subcommand per ``launch/cmd_<name>.py`` module named in SUBCOMMANDS."""
    parser = argparse.ArgumentParser(prog="tar2tf", description=__doc__.split("\n")[0],
                                     epilog=__doc__.split("\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = f"launch.cmd_{name}"
        if importlib.util.find_spec(module) is None:
            continue
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if extra and not getattr(args, "accepts_beam_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.beam_args = extra
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("tar2tf: interrupted", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
