"""Beam's pipeline options, checked the way Beam parses them: the flags that tar2tf's
parser leaves over must be Beam options (:func:`check_beam_args`), so that a typo is a
usage error, not a job that silently runs without the option.  ``launch.cli`` calls it
for every command line with leftovers; the dry run (``launch.dry_run``) too.
"""

from __future__ import annotations

import importlib
import logging
from typing import Collection, Dict, List

from launch.args import UsageError, did_you_mean

log = logging.getLogger("tar2tf")

# portable runners whose job server tells Beam, at submission, of more options (Flink's
# Java-side ones): a flag unknown here may still be theirs
JOB_SERVER_RUNNERS = ("FlinkRunner", "SparkRunner", "PortableRunner")


def beam_parser(beam_args: List[str]):
    """An argparse parser of every Beam pipeline option, built the way
    ``PipelineOptions.get_all_options`` builds the one Beam parses a job's flags with: the
    ``_add_argparse_args`` of each registered ``PipelineOptions`` subclass.  The options of
    the Flink, Spark, portable and Dataflow runners are defined in Beam's
    ``pipeline_options`` module; the named runner's own module is imported too, since a
    runner may define its options there (``DaskOptions``) and registers them on import.
    Errors (a bad value, ``--direct_num_workers=x``) raise :class:`UsageError`."""
    from apache_beam.options import pipeline_options as po

    from pipelines.beam.options import runner_name

    class StrictParser(po._BeamArgumentParser):  # pylint: disable=protected-access
        def error(self, message):
            raise UsageError(f"tar2tf: {message}")

    if any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        name = runner_name(beam_args)
        known = {
            path.rsplit(".", 1)[-1].lower(): path for path in po.StandardOptions.ALL_KNOWN_RUNNERS
        }
        path = known.get(name.lower(), known.get(name.lower() + "runner", name))
        if "." in path:
            try:
                importlib.import_module(path.rsplit(".", 1)[0])
            except Exception:
                pass
    parser = StrictParser(allow_abbrev=False)
    classes: Dict[str, type] = {}
    for cls in po.PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


def check_beam_args(beam_args: List[str], tar2tf_flags: Collection[str] = ()) -> None:
    """Raise :class:`launch.args.UsageError` for the flags (and their values) left over by
    tar2tf's parser that Beam's does not know either.  Beam would only log them and run
    without them, so ``--max-shard-szie 20KB`` made a job that ignored the bound and
    exited 0.  On a job-server runner (:data:`JOB_SERVER_RUNNERS`) an unknown flag
    spelled like a Beam option (``--checkpointing_interval``) is kept with a warning, as
    only its job server can tell; one spelled like a tar2tf option (``--max-shard-szie``,
    ``--records_per_shard``) is still an error.  ``tar2tf_flags``: the subcommand's own."""
    from pipelines.beam.options import runner_name

    check_runner(beam_args)
    parser = beam_parser(beam_args)
    _, unknown = parser.parse_known_args(beam_args)
    if not unknown:
        return
    flags = [a.split("=", 1)[0] for a in unknown if a.startswith("-")]
    if (
        runner_name(beam_args).rsplit(".", 1)[-1] in JOB_SERVER_RUNNERS
        and flags
        and all(
            f.startswith("--") and "-" not in f[2:] and f.replace("_", "-") not in tar2tf_flags
            for f in flags
        )
    ):
        log.warning(
            "%s: not Beam Python pipeline option(s); passed on for the %s job server to check",
            " ".join(unknown),
            runner_name(beam_args),
        )
        return
    # argparse gives SOURCE... only the words before the first option; later ones are left over
    why = (
        "sources go before the options"
        if not unknown[0].startswith("-")
        else "neither a tar2tf option nor a Beam pipeline option"
    )
    # tar2tf's own flags first: a misspelt flag is more often tar2tf's than Beam's
    hint = did_you_mean(unknown, [*sorted(tar2tf_flags), *parser._option_string_actions])
    why += f"; {hint}" if hint else ""
    raise UsageError(f"tar2tf: unrecognized arguments: {' '.join(unknown)} ({why})")


# tar2tf's own runner names (pipelines.beam.options), listed before Beam's in an error
# (``local``, an alias of ``inprocess``, is accepted but not listed)
OWN_RUNNERS = {"inprocess": "tar2tf's in-process driver", "beam": "Beam's local runner"}


def beam_runner_names() -> List[str]:
    """The runner names Beam knows (``FlinkRunner`` ...), as ``--runner`` takes them."""
    from apache_beam.options.pipeline_options import StandardOptions

    return sorted({path.rsplit(".", 1)[-1] for path in StandardOptions.ALL_KNOWN_RUNNERS})


def check_runner(beam_args: List[str]) -> None:
    """Raise :class:`UsageError` when ``--runner`` names no runner: tar2tf's (``inprocess``
    or its alias ``local``, ``beam``), Beam's (as Beam matches them: any case, ``Runner``
    optional) or a runner class's qualified name.  Beam would refuse it only once the job starts, listing its
    own runners but not tar2tf's."""
    import difflib

    from pipelines.beam.options import IN_PROCESS_NAMES, LOCAL_BEAM, runner_name

    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        return
    name = runner_name(beam_args)
    beam = beam_runner_names()
    known = {n.lower() for n in [*OWN_RUNNERS, *IN_PROCESS_NAMES, *LOCAL_BEAM, *beam]}
    if "." in name or name.lower() in known or name.lower() + "runner" in known:
        return
    listed = [
        *OWN_RUNNERS,
        *(n for n in beam if not n.startswith("Test")),
    ]  # not Beam's test runners
    lower = [n.lower() for n in listed]
    close = difflib.get_close_matches(name.lower(), lower, n=1, cutoff=0.6)
    hint = f" (did you mean {listed[lower.index(close[0])]}?)" if close else ""
    own = ", ".join(f"{n} ({what})" for n, what in OWN_RUNNERS.items())
    raise UsageError(
        f"tar2tf: --runner {name}: not a runner{hint}; tar2tf's: {own}; Beam's: "
        f"{', '.join(listed[len(OWN_RUNNERS) :])}, or a PipelineRunner subclass's qualified name"
    )
