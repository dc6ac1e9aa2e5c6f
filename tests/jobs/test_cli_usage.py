"""Usage errors of the ``tar2tf`` CLI: exit status 2 and one ``tar2tf...`` line on stderr,
found before a job starts (misspelled flags, counts out of range, paths that cannot be
written, an --output without a file name, --ops arguments); and the Beam flags that must
still pass (local runner, Flink, Dataflow, as launch/flink.sh and launch/dataflow.sh give them)."""

import os

import pytest
from support.scripts import launch_script

from launch import cli
from transforms.sizes import FORMS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards")
SHARD = os.path.join(DEMO, "demo-0.tar")
HAS_PROC = os.path.isdir("/proc/self")


def _convert(*args):
    return cli.main(["convert", *args, "--no-progress"])


def _one_line(capfd) -> str:
    """stderr of the run (this process and its workers), which must be one ``tar2tf`` line."""
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tar2tf"), err[-3000:]
    return lines[0]


def _records(directory) -> list:
    return (
        sorted(n for n in os.listdir(directory) if n.endswith(".record"))
        if os.path.isdir(directory)
        else []
    )


# -- 1. flags neither tar2tf's nor Beam's -----------------------------------------------------


@pytest.mark.parametrize(
    "typo, meant",
    [
        (["--max-shard-szie", "20KB"], "--max-shard-size"),
        (["--records_per_shard", "5"], "--records-per-shard"),
        (["--max-shard-szie=20KB"], "--max-shard-size"),
        (["--direct_num_workerz=2"], "--direct_num_workers"),
    ],
)
def test_misspelled_flag_is_a_usage_error(tmp_path, capfd, typo, meant):
    """Beam only logged what it could not parse (or nothing), and the job ran without it;
    the error names the flag meant (tar2tf's or Beam's)."""
    assert _convert(SHARD, "-o", str(tmp_path / "o" / "d-{}.record"), *typo) == 2
    assert _one_line(capfd) == (
        f"tar2tf: unrecognized arguments: {' '.join(typo)} "
        f"(neither a tar2tf option nor a Beam pipeline option; did you mean {meant}?)"
    )
    assert not os.path.exists(tmp_path / "o")


def test_a_second_run_of_sources_is_not_dropped(tmp_path, capfd):
    """argparse gives SOURCE only the words before the first option: the rest went to
    Beam, which ignored them, and the job converted one shard of two."""
    assert (
        _convert(SHARD, "-o", str(tmp_path / "d-{}.record"), os.path.join(DEMO, "demo-1.tar")) == 2
    )
    assert "sources go before the options" in _one_line(capfd)


def test_bad_beam_option_value_is_one_line(tmp_path, capfd):
    assert _convert(SHARD, "-o", str(tmp_path / "d-{}.record"), "--direct_num_workers=two") == 2
    assert "--direct_num_workers: invalid int value: 'two'" in _one_line(capfd)


FLINK = [
    "--runner=FlinkRunner",
    "--flink_master=[local]",
    "--flink_version=1.19",
    "--flink_job_server_jar=/j/beam-runners-flink-1.19-job-server-2.77.0.jar",
    "--environment_type=LOOPBACK",
    "--parallelism=4",
    "--flink_submit_uber_jar",
    "--environment_config",
    "img",
]
DATAFLOW = [
    "--runner=DataflowRunner",
    "--project",
    "p",
    "--region",
    "r",
    "--temp_location",
    "gs://b/t",
    "--setup_file",
    "./setup.py",
    "--max_num_workers=50",
    "--machine_type=n2-standard-4",
    "--requirements_file=r.txt",
    "--extra_package=x.whl",
    "--sdk_container_image=i",
    "--sdk_location=container",
]
LOCAL = [
    "--direct_num_workers=4",
    "--direct_running_mode=in_memory",
    "--direct_num_workers",
    "2",
    "--direct_running_mode",
    "multi_threading",
    "--save_main_session",
]


# what the job's PipelineOptions hold after each flag set: a flag accepted but dropped (or
# swallowed as the previous flag's value) would show here
FLINK_WANT = dict(
    runner="FlinkRunner",
    flink_master="[local]",
    flink_version="1.19",
    flink_job_server_jar=FLINK[3].split("=", 1)[1],
    environment_type="LOOPBACK",
    parallelism=4,
    flink_submit_uber_jar=True,
    environment_config="img",
)
DATAFLOW_WANT = dict(
    runner="DataflowRunner",
    project="p",
    region="r",
    temp_location="gs://b/t",
    setup_file="./setup.py",
    max_num_workers=50,
    machine_type="n2-standard-4",
    requirements_file="r.txt",
    extra_packages=["x.whl"],
    sdk_container_image="i",
    sdk_location="container",
)
LOCAL_WANT = dict(
    direct_num_workers=2, direct_running_mode="multi_threading", save_main_session=True
)


@pytest.mark.parametrize(
    "flags, want",
    [(FLINK, FLINK_WANT), (DATAFLOW, DATAFLOW_WANT), (LOCAL, LOCAL_WANT)],
    ids=["flink", "dataflow", "local"],
)
def test_beam_and_runner_flags_still_pass(flags, want):
    from apache_beam.options.pipeline_options import PipelineOptions

    from launch.runner_args import check_beam_args
    from pipelines.beam.options import effective_args

    check_beam_args(flags)  # no UsageError
    args = effective_args(flags)  # the job's Beam arguments: the user's flags win over defaults
    got = PipelineOptions(args).get_all_options()
    assert {k: got[k] for k in want} == want


def test_job_server_runners_keep_their_own_flags():
    """Flink's job server names more options at submission (its Java-side ones): a
    snake_case flag is kept there; one spelled like tar2tf's is still an error."""
    from launch.args import UsageError
    from launch.runner_args import check_beam_args

    check_beam_args(["--runner=FlinkRunner", "--checkpointing_interval", "1000"])
    for typo in (["--records_per_shard", "5"], ["--max-shard-szie", "5"]):
        with pytest.raises(UsageError, match="unrecognized arguments"):
            check_beam_args(["--runner=FlinkRunner", *typo], tar2tf_flags={"--records-per-shard"})
    with pytest.raises(UsageError, match="unrecognized arguments: --checkpointing_interval 1000"):
        check_beam_args(["--runner=DataflowRunner", "--checkpointing_interval", "1000"])


def test_local_beam_flags_reach_the_job(tmp_path, capfd):
    out = tmp_path / "o"
    assert (
        _convert(
            SHARD,
            "-o",
            str(out / "d-{}.record"),
            "--direct_num_workers",
            "2",
            "--direct_running_mode=in_memory",
            "--processes",
            "0",
        )
        == 0
    )
    assert _records(out) == ["d-1.record"]


def _script(name, *args, **env):
    return launch_script(name, "--dry-run", *args, env={"PYTHONPATH": ROOT, **env}, timeout=300)


@pytest.mark.slow
def test_flink_and_dataflow_scripts_flag_sets_parse(tmp_path):
    """launch/flink.sh and launch/dataflow.sh --dry-run parse the flags they add (and the
    user's) as the CLI does: a typo fails there too."""
    jar = tmp_path / "beam-runners-flink-1.19-job-server-2.77.0.jar"
    jar.write_bytes(b"")
    flink = dict(FLINK_VERSION="1.19", FLINK_JOB_SERVER_JAR=str(jar))
    out = str(tmp_path / "d-{}.record")
    p = _script("flink.sh", SHARD, "-o", out, "--parallelism=2", **flink)
    assert p.returncode == 0, p.stderr[-2000:]
    p = _script("flink.sh", SHARD, "-o", out, "--max-shard-szie", "20KB", **flink)
    assert p.returncode == 2 and "unrecognized arguments: --max-shard-szie 20KB" in p.stderr, (
        p.stderr[-2000:]
    )
    cloud = dict(PROJECT="p", TEMP_LOCATION="gs://b/tmp")
    p = _script(
        "dataflow.sh",
        "gs://b/x-{0..3}.tar",
        "-o",
        "gs://b/o/x-{}.record",
        "--max_num_workers=50",
        **cloud,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    p = _script(
        "dataflow.sh",
        "gs://b/x-{0..3}.tar",
        "-o",
        "gs://b/o/x-{}.record",
        "--records_per_shard",
        "5",
        **cloud,
    )
    assert p.returncode == 2 and "unrecognized arguments: --records_per_shard 5" in p.stderr, (
        p.stderr[-2000:]
    )


# -- 2. local paths that cannot be written --------------------------------------------------------


def _unwritable_cases(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ok = str(tmp_path / "o" / "d-{}.record")
    cases = {
        "output under a file": (["-o", str(blocker / "d-{}.record")], str(blocker)),
        "work-dir under a file": (["-o", ok, "--work-dir", str(blocker / "w")], str(blocker)),
        "summary in a missing dir": (
            ["-o", ok, "--summary-json", "/nonexistent/dir/x.json"],
            "/nonexistent/dir",
        ),
    }
    if HAS_PROC:
        cases["output in /proc"] = (["-o", "/proc/x/d-{}.record"], "/proc/x")
        cases["work-dir in /proc"] = (["-o", ok, "--work-dir", "/proc/x"], "/proc")
    return cases


@pytest.mark.parametrize(
    "case",
    [
        "output under a file",
        "work-dir under a file",
        "summary in a missing dir",
        "output in /proc",
        "work-dir in /proc",
    ],
)
def test_unwritable_path_is_one_line_before_the_job(tmp_path, capfd, case):
    cases = _unwritable_cases(tmp_path)
    if case not in cases:
        pytest.skip("no /proc")
    args, named = cases[case]
    assert _convert(SHARD, *args) == 2
    line = _one_line(capfd)
    assert named in line and "Traceback" not in line, line
    assert _records(tmp_path / "o") == []  # found before the job: nothing converted


def test_output_directory_is_created_and_summary_written(tmp_path, capfd):
    out, summary = tmp_path / "new" / "sub", tmp_path / "s.json"
    assert (
        _convert(
            SHARD,
            "-o",
            str(out / "d-{}.record"),
            "--summary-json",
            str(summary),
            "--work-dir",
            str(tmp_path / "w" / "x"),
        )
        == 0
    )
    assert _records(out) == ["d-1.record"] and summary.exists()


def test_pcr_unwritable_output_and_summary(tmp_path, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["pcr", SHARD, "-o", str(blocker / "p"), "--no-progress"]) == 2
    assert str(blocker) in _one_line(capfd)
    assert (
        cli.main(
            [
                "pcr",
                SHARD,
                "-o",
                str(tmp_path / "p"),
                "--no-progress",
                "--summary-json",
                str(tmp_path / "nope" / "s.json"),
            ]
        )
        == 2
    )
    assert "--summary-json" in _one_line(capfd)


def test_a_usage_error_found_by_the_job_leaves_no_new_directory(tmp_path, capfd):
    """The output directory is made before the job (to check it takes files); a usage
    error the job itself finds then takes away what was made, if still empty, and only that."""
    (tmp_path / "kept").mkdir()
    assert _convert(SHARD, "-o", str(tmp_path / "kept" / "new" / "a-{}-{}.record")) == 2
    assert "only one shard-number field" in _one_line(capfd)
    assert os.listdir(tmp_path) == ["kept"] and os.listdir(tmp_path / "kept") == []
    bad = tmp_path / "kept" / "scans.txt"
    bad.write_text("0 1 2: 0 0 0 0;\n")  # DC only: AC never sent, which jpegtran itself accepts
    assert (
        cli.main(
            ["pcr", SHARD, "-o", str(tmp_path / "p" / "q"), "--scans", str(bad), "--no-progress"]
        )
        == 2
    )
    assert "scans.txt" in _one_line(capfd)
    assert sorted(os.listdir(tmp_path)) == ["kept"]
    # no input found is a usage error too (tests/jobs/test_missing_inputs.py)
    assert _convert(str(tmp_path / "nothing-*.tar"), "-o", str(tmp_path / "r" / "x-{}.record")) == 2
    assert "no input found" in _one_line(capfd)
    assert sorted(os.listdir(tmp_path)) == ["kept"]
    # a job that wrote something (its rejects and manifest) keeps its new directory
    (tmp_path / "kept" / "bad.tar").write_bytes(b"not a tar\n" * 100)
    assert (
        _convert(str(tmp_path / "kept" / "bad.tar"), "-o", str(tmp_path / "r" / "x-{}.record")) == 3
    )
    capfd.readouterr()
    assert (tmp_path / "r" / "x.record.rejects.jsonl").exists()


# -- 3. counts out of range ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,says",
    [
        (["--max-rejects", "-1"], "argument --max-rejects: must be >= 0, got -1"),
        (["--records-per-shard", "0"], "argument --records-per-shard: must be >= 1, got 0"),
        (["--retry-attempts", "0"], "argument --retry-attempts: must be >= 1, got 0"),
        (["--retry-total", "0"], "argument --retry-total: must be > 0, got 0"),
        (["--processes", "-1"], "argument --processes: must be 0..256, got -1"),
        (["--max-rejects", "many"], "argument --max-rejects: not an integer: 'many'"),
        (["--spool-limit", "0"], "argument --spool-limit: size must be positive, got '0'"),
        (
            ["--spool-limit", "lots"],
            f"argument --spool-limit: invalid size 'lots': {FORMS}",
        ),
        (
            ["--max-shard-size", "12XB"],
            f"argument --max-shard-size: invalid size '12XB': {FORMS}",
        ),
        (["--max-shard-size", "0"], "argument --max-shard-size: size must be positive, got '0'"),
        (
            ["--max-member-size", "0MB"],
            "argument --max-member-size: size must be positive, got '0MB'",
        ),
    ],
)
def test_out_of_range_count_is_a_usage_error(tmp_path, capfd, args, says):
    assert _convert(SHARD, "-o", str(tmp_path / "d-{}.record"), *args) == 2
    assert _one_line(capfd) == f"tar2tf convert: {says}"
    assert _records(tmp_path) == []


@pytest.mark.parametrize(
    "args,says",
    [
        (["--images-per-record", "0"], "--images-per-record: must be >= 1"),
        (["--quality", "101"], "--quality: must be 1..100"),
        (["--max-rejects", "-2"], "--max-rejects: must be >= 0"),
    ],
)
def test_pcr_out_of_range_count_is_a_usage_error(tmp_path, capfd, args, says):
    assert cli.main(["pcr", SHARD, "-o", str(tmp_path / "p"), *args]) == 2
    assert says in _one_line(capfd)
    assert not os.path.exists(tmp_path / "p")


def test_argparse_errors_are_one_line_and_returned(capfd):
    """argparse printed the whole usage and raised SystemExit; main() returns 2."""
    assert cli.main(["convert", SHARD]) == 2
    assert _one_line(capfd) == "tar2tf convert: the following arguments are required: --output/-o"
    assert cli.main(["verify", "x", "--bogus"]) == 2
    assert _one_line(capfd) == "tar2tf: unrecognized arguments: --bogus"
    assert cli.main(["verify", "x", "--decode-imags"]) == 2
    assert _one_line(capfd) == (
        "tar2tf: unrecognized arguments: --decode-imags (did you mean --decode-images?)"
    )


# -- 4. --output without a file name ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "{}", "{}.record"])
def test_output_needs_a_file_name(tmp_path, capfd, name):
    """``out/`` wrote ``out/-00000-of-00001`` and a hidden ``out/.manifest.json``."""
    out = tmp_path / "out"
    assert _convert(SHARD, "-o", f"{out}/{name}") == 2
    assert (
        _one_line(capfd) == "tar2tf convert: --output needs a file name (e.g. out/train-{}.record)"
    )
    assert not out.exists()


# -- 5. --ops arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ops,says",
    [
        ("[Decode(jpg, channels=3)]", "quote an op whose arguments have commas"),
        ('["Resize(jpg, 32)"]', "expected Resize(what, size: Tuple[int, int]"),
        (
            '["Rotate(jpg, angle=abc)"]',
            "bad arguments for Rotate: angle must be a number, not 'abc'",
        ),
        ("[{Rotate: {what: jpg, angle: abc}}]", "angle must be a number, not 'abc'"),
        ('["Encode(Decode(jpg), quality=high)"]', "quality must be a number, not 'high'"),
    ],
)
def test_ops_argument_errors_say_what_is_expected(tmp_path, capfd, ops, says):
    assert _convert(SHARD, "-o", str(tmp_path / "d-{}.record"), "--ops", ops) == 2
    assert says in _one_line(capfd)
    assert _records(tmp_path) == []


def test_ops_numbers_still_accepted(tmp_path, capfd):
    assert (
        _convert(
            SHARD,
            "-o",
            str(tmp_path / "d-{}.record"),
            "--processes",
            "0",
            "--ops",
            '["Rotate(Decode(jpg), angle=30.5)", "Encode(jpg, quality=80)"]',
        )
        == 0
    )
    assert _records(tmp_path) == ["d-1.record"]


@pytest.mark.slow
def test_usage_errors_are_one_line_from_python_m_too(tmp_path):
    """``python -m launch.cli`` (as the launch scripts and docs run it): the module runs as
    ``__main__``, and the usage errors raised by other modules (the subcommands, the Beam
    option check) must still be caught there."""
    from support.cli_fixtures import cli as run_cli

    for args in (["--max_shard_size=10KB"], ["--max-shard-szie", "20KB"]):
        p = run_cli("convert", SHARD, "-o", str(tmp_path / "d-{}.record"), *args)
        assert p.returncode == 2 and [line for line in p.stderr.splitlines() if line.strip()] == [
            f"tar2tf: unrecognized arguments: {' '.join(args)} (neither a tar2tf option nor a "
            "Beam pipeline option; did you mean --max-shard-size?)"
        ]
    assert not os.path.exists(tmp_path / "d-1.record")


# -- 6. inspect and pcr-report counts -------------------------------------------------------------------


@pytest.fixture
def one_record(tmp_path):
    from transforms.tfrecord.framing import frame

    path = tmp_path / "one.record"
    path.write_bytes(frame(b""))  # one empty Example: a readable shard with no images
    return str(path)


@pytest.mark.parametrize(
    "args,says",
    [
        (["-n", "-1"], "argument -n/--records: must be >= 0, got -1"),
        (["--records", "3x"], "argument -n/--records: not an integer: '3x'"),
        (["--images", "0"], "argument --images: must be 1..1024, got 0"),
        (["--images", "-4"], "argument --images: must be 1..1024, got -4"),
        (["--images", "100000000000"], "argument --images: must be 1..1024, got 100000000000"),
    ],
)
def test_inspect_count_out_of_range_is_a_usage_error(one_record, tmp_path, capfd, args, says):
    """-n -1 printed no records and --images 0 or -4 said "no images found" (exit 0); a
    huge --images would have kept every image of the shard for one giant sheet."""
    sheet = tmp_path / "sheet.png"
    assert cli.main(["inspect", one_record, "--sheet", str(sheet), *args]) == 2
    assert _one_line(capfd) == f"tar2tf inspect: {says}"
    assert not sheet.exists()


def test_inspect_counts_that_make_sense_still_pass(one_record, capfd):
    for n in ("0", "100000000000000000000"):  # the schema only; every record
        assert cli.main(["inspect", one_record, "-n", n, "--no-sheet"]) == 0
        out = capfd.readouterr().out
        assert f"{one_record}: 1 records" in out and ("record 0:" in out) == (n != "0")


@pytest.mark.parametrize("sample", ["-1", "-32"])
def test_pcr_report_negative_sample_is_a_usage_error(tmp_path, capfd, sample):
    """--sample -1 ran the report as --sample 0 (bytes only) would; 0 stays: bytes only."""
    (tmp_path / "PCR_index.pb").write_bytes(b"")  # an empty index: a dataset the report would read
    assert cli.main(["pcr-report", str(tmp_path), "--sample", sample]) == 2
    assert _one_line(capfd) == f"tar2tf pcr-report: argument --sample: must be >= 0, got {sample}"
    assert not (tmp_path / "PCR_report.json").exists()
