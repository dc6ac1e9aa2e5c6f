"""The CLI's help and usage errors point at what was meant: a misspelt choice, subcommand
or runner gets a "did you mean" (argparse has them only from Python 3.14 on, for choices),
``--runner`` errors list tar2tf's own runners before Beam's, and every subcommand's
``--help`` is plain text that lists ``--runner`` where a job takes it.  (Misspelt flags:
tests/jobs/test_cli_usage.py.)"""

from __future__ import annotations

import re

import pytest

from launch import cli
from launch.args import UsageError, close_flag, known_args
from launch.runner_args import check_beam_args


def _error(argv) -> str:
    with pytest.raises(UsageError) as e:
        known_args(cli.build_parser(), argv)
    return str(e.value)


def test_misspelt_subcommand_and_choice_get_a_suggestion():
    assert _error(["convrt", "x"]) == (
        "tar2tf: argument command: invalid choice: 'convrt', did you mean 'convert'? "
        "(choose from 'convert', 'pcr', 'pcr-report', 'verify', 'inspect')"
    )
    assert _error(["convert", "x", "-o", "t.record", "--format", "tfrecrd"]) == (
        "tar2tf convert: argument --format: invalid choice: 'tfrecrd', did you mean "
        "'tfrecord'? (choose from 'tfrecord', 'array_record')"
    )
    # nothing close: the choices alone
    assert _error(["convert", "x", "-o", "t.record", "--format", "zip"]).endswith(
        "invalid choice: 'zip' (choose from 'tfrecord', 'array_record')"
    )


def test_close_flag():
    flags = ["--max-shard-size", "--max-member-size", "--records-per-shard", "--base"]
    assert close_flag("--max-shard-szie", flags) == "--max-shard-size"
    assert close_flag("--records_per_shard=5", flags) == "--records-per-shard"
    assert close_flag("--bogus", flags) is None


@pytest.mark.parametrize(
    "runner, meant", [("beams", "beam"), ("inproces", "inprocess"), ("FlinkRuner", "FlinkRunner")]
)
def test_an_unknown_runner_lists_tar2tfs_runners_first(runner, meant):
    """Beam refused it only once the job started, listing its runners but not tar2tf's."""
    with pytest.raises(UsageError) as e:
        check_beam_args(["--runner", runner])
    msg = str(e.value)
    assert msg.startswith(
        f"tar2tf: --runner {runner}: not a runner (did you mean {meant}?); tar2tf's: "
        "inprocess (tar2tf's in-process driver), beam (Beam's local runner); Beam's: "
    ), msg
    assert "FlinkRunner" in msg and "DataflowRunner" in msg


@pytest.mark.parametrize(
    "runner",
    ["beam", "inprocess", "local", "DirectRunner", "flinkrunner", "Flink", "my.module.MyRunner"],
)
def test_runner_names_beam_takes_pass(runner):
    check_beam_args(["--runner", runner])


def test_runner_parsed_by_the_subcommand_still_reaches_beam():
    args, extra = known_args(
        cli.build_parser(),
        ["convert", "x", "-o", "t.record", "--runner=FlinkRunner", "--parallelism=2"],
    )
    assert extra == ["--runner", "FlinkRunner", "--parallelism=2"]
    assert known_args(cli.build_parser(), ["convert", "x", "-o", "t.record"])[1] == []


@pytest.mark.parametrize("sub", sorted(cli.build_parser().subcommands))
def test_help_is_plain_text(sub):
    text = cli.build_parser().subcommands[sub].format_help()
    # no reStructuredText, no source files or modules of tar2tf named
    assert not re.search(r"``|:func:|:mod:|\w+\.py\b|pipelines\.\w", text), text
    if sub in ("convert", "pcr"):
        assert re.search(r"^  --runner NAME +where the job runs: inprocess", text, re.M), text
        assert "'local' is an alias" in " ".join(text.split()), text


def test_top_level_help_is_plain_text():
    assert "``" not in cli.build_parser().format_help()
