"""The real pipelines on Apache Flink (Beam's portable Flink runner, embedded cluster,
LOOPBACK workers) through launch/flink.sh: TFRecords (plain and --shuffle) and PCR,
each byte-identical to the local runner's output."""

import json
import os
import subprocess

import pytest
from support.cli_fixtures import DEMO_ARGS, DEMO_SOURCES, ROOT, cli, output_digest
from support.flink_fixtures import CACHE, flink_sh
from support.pcr_fixtures import bad_files, make_image_folder, requires_jpegtran, sample_images


def test_flink_script_options(tmp_path):
    """The script's arguments parse as Beam Flink options (no Flink needed)."""
    jar = tmp_path / "beam-runners-flink-2.0-job-server-9.9.9.jar"
    jar.write_bytes(b"")
    fake = {"FLINK_JOB_SERVER_JAR": str(jar), "FLINK_VERSION": "2.0"}
    p = flink_sh(
        "--dry-run",
        DEMO_SOURCES,
        "--output",
        str(tmp_path / "o-{}.record"),
        "--parallelism=2",
        **fake,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    d = json.loads(p.stdout)
    from apache_beam.options.pipeline_options import (
        FlinkRunnerOptions,
        PipelineOptions,
        PortableOptions,
    )

    o = PipelineOptions(d["beam_args"])
    f = o.view_as(FlinkRunnerOptions)
    assert (f.flink_master, f.flink_version, f.flink_job_server_jar, f.parallelism) == (
        "[local]",
        "2.0",
        str(jar),
        2,
    )
    assert (
        o.view_as(PortableOptions).environment_type == "LOOPBACK" and d["runner"] == "FlinkRunner"
    )
    # a real cluster cannot call back into LOOPBACK workers, nor read this machine's disk
    p = flink_sh(
        "--dry-run", DEMO_SOURCES, "--output", "out/o-{}.record", FLINK_MASTER="jm:8081", **fake
    )
    assert p.returncode == 2 and "LOOPBACK" in p.stderr and "is a local path" in p.stderr
    p = flink_sh(
        "--dry-run",
        "gs://b/x-{0..3}.tar",
        "--output",
        "gs://b/o/o-{}.record",
        FLINK_MASTER="jm:8081",
        ENVIRONMENT_TYPE="EXTERNAL",
        ENVIRONMENT_CONFIG="localhost:50000",
        **fake,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["portable"] == {
        "environment_type": "EXTERNAL",
        "environment_config": "localhost:50000",
        "job_endpoint": None,
    }
    p = flink_sh(
        "--dry-run",
        DEMO_SOURCES,
        "--output",
        "o",
        FLINK_VERSION="1.19",
        FLINK_JOB_SERVER_JAR=str(jar),
    )
    assert p.returncode == 2 and "does not match the jar" in p.stderr
    # a first argument `pcr` runs `tar2tf pcr`; its own options parse, convert's do not
    p = flink_sh(
        "pcr",
        DEMO_SOURCES,
        "--output",
        str(tmp_path / "pcr"),
        "--images-per-record",
        "8",
        "--dry-run",
        **fake,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["command"] == "pcr"
    p = flink_sh(
        "pcr",
        DEMO_SOURCES,
        "--output",
        str(tmp_path / "pcr"),
        "--max-shard-size",
        "1MB",
        "--dry-run",
        **fake,
    )
    assert p.returncode == 2 and "--max-shard-size" in p.stderr
    p = flink_sh("--dry-run", DEMO_SOURCES, "--output", str(tmp_path / "o-{}.record"), **fake)
    assert json.loads(p.stdout)["command"] == "convert"
    # the job server's log level: WARN less four known-harmless loggers, or FLINK_LOG_LEVEL for all
    jvm = [
        a for a in json.loads(p.stdout)["beam_args"] if a.startswith("--job_server_jvm_properties=")
    ]
    assert jvm[0] == "--job_server_jvm_properties=-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
    assert len(jvm) == 5 and all(a.endswith("=error") for a in jvm[1:])
    p = flink_sh(
        "--dry-run",
        DEMO_SOURCES,
        "--output",
        str(tmp_path / "o-{}.record"),
        FLINK_LOG_LEVEL="debug",
        **fake,
    )
    assert [
        a for a in json.loads(p.stdout)["beam_args"] if a.startswith("--job_server_jvm_properties=")
    ] == ["--job_server_jvm_properties=-Dorg.slf4j.simpleLogger.defaultLogLevel=debug"]


def _on_flink(flink, *args, **env):
    p = flink_sh(*args, "--no-progress", "--parallelism=2", **flink, **env)
    assert p.returncode == 0, p.stderr[-5000:]
    if "FLINK_LOG_LEVEL" not in env:
        # a normal run's stderr holds none of the job server's INFO records (nor Beam's
        # service start-up chatter: test_beam_service_log); that Beam started the job
        # server shows where its INFO log is asked for (test_flink_shuffle_equals_local_runner)
        assert "INFO FlinkJarJobServer:" not in p.stderr, p.stderr[-5000:]
    return p


@pytest.mark.flink
@pytest.mark.slow
def test_flink_output_equals_local_runner(flink, demo_output, tmp_path):
    summary = tmp_path / "summary.json"
    p = _on_flink(
        flink,
        DEMO_SOURCES,
        "--output",
        str(tmp_path / "out" / "demo-{}.record"),
        *DEMO_ARGS,
        "--summary-json",
        str(summary),
    )
    assert output_digest(str(tmp_path / "out")) == output_digest(demo_output[0])
    rep = json.load(open(summary))
    assert rep["counters_reported"] and rep["counter_mismatches"] == [], (rep, p.stderr[-3000:])
    assert rep["counters"]["records_written"] == 96


@pytest.mark.flink
@pytest.mark.slow
def test_flink_array_record_equals_in_process(flink, tmp_path):
    """ArrayRecord shards written on Flink's workers are the in-process driver's bytes."""
    args = ("--max-shard-size", "200KB", "--type-map", "cls:int64")
    out = str(tmp_path / "f" / "demo-{}.array_record")
    _on_flink(flink, DEMO_SOURCES, "--output", out, *args)
    p = cli(
        "convert",
        DEMO_SOURCES,
        "-o",
        str(tmp_path / "l" / "demo-{}.array_record"),
        *args,
        "--runner",
        "local",
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got, want = output_digest(str(tmp_path / "f")), output_digest(str(tmp_path / "l"))
    assert len([n for n in want if n.endswith(".array_record")]) > 1
    assert {k: v for k, v in got.items() if not k.endswith(".json")} == {
        k: v for k, v in want.items() if not k.endswith(".json")
    }


@pytest.mark.flink
@pytest.mark.slow
def test_flink_shuffle_equals_local_runner(flink, tmp_path):
    """--shuffle moves records through the runner's GroupByKey: Flink's shuffle must give
    the local runner's bytes, and a different order than no shuffle."""
    args = ("--type-map", "cls:int64", "--records-per-shard", "20", "--seed", "3")
    p = _on_flink(
        flink,
        DEMO_SOURCES,
        "--output",
        str(tmp_path / "f" / "s-{}.record"),
        "--shuffle",
        *args,
        FLINK_LOG_LEVEL="info",
    )
    # the job server's own log reaches stderr (an SLF4J binding; launch/job_server_log.py)
    assert (
        "INFO FlinkJarJobServer: [main] INFO org.apache.beam.runners.jobsubmission.JobServerDriver - "
        "JobService started on localhost:" in p.stderr
    ), p.stderr[-5000:]
    for name, extra in (("l", ("--shuffle",)), ("n", ())):
        p = cli(
            "convert",
            DEMO_SOURCES,
            "--output",
            str(tmp_path / name / "s-{}.record"),
            *args,
            *extra,
            "--no-progress",
        )
        assert p.returncode == 0, p.stderr
    flinked, local = output_digest(str(tmp_path / "f")), output_digest(str(tmp_path / "l"))
    assert (
        len(flinked) == 7 and flinked == local
    )  # 5 shards of <= 20 of the 96 records, manifest, rejects
    assert flinked["s-1.record"] != output_digest(str(tmp_path / "n"))["s-1.record"]


@requires_jpegtran
@pytest.mark.flink
@pytest.mark.slow
def test_flink_pcr_equals_local_runner(flink, tmp_path):
    """The PCR pipeline on Flink (`launch/flink.sh pcr ...`): same .db files and index as
    the local runner's, the same rejects for the broken files."""
    folder = make_image_folder(str(tmp_path / "folder"), dict(sample_images(), **bad_files()))
    args = ("--output",), ("--images-per-record", "4", "--seed", "5", "--max-rejects", "10")
    _on_flink(flink, "pcr", folder, args[0][0], str(tmp_path / "f"), *args[1])
    p = cli("pcr", folder, args[0][0], str(tmp_path / "l"), *args[1], "--no-progress")
    assert p.returncode == 0, p.stderr
    flinked = output_digest(str(tmp_path / "f"))
    assert flinked == output_digest(str(tmp_path / "l"))
    assert "PCR_index.pb" in flinked and "PCR_0.db" in flinked
    rejects = open(tmp_path / "f" / "PCR.rejects.jsonl").read().splitlines()
    assert len(rejects) == len(bad_files())


def test_setup_step_takes_the_flink_version_from_a_given_jar(tmp_path):
    """TAR2TF_FLINK_JOB_SERVER_JAR names a jar you have: its Flink version comes from its
    Maven name (TAR2TF_FLINK_VERSION overrides), not from the newest Flink Beam publishes."""
    py = open(os.path.join(CACHE, "venv-current")).read().strip()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "venv-current").write_text(py + "\n")
    jar = tmp_path / "beam-runners-flink-1.19-job-server-2.77.0.jar"
    jar.write_bytes(b"PK\x03\x04 not really a jar")
    step = os.path.join(ROOT, "launch", "setup.d", "50-flink.sh")

    def version(**extra):
        env = {k: v for k, v in os.environ.items() if k != "TAR2TF_FLINK_VERSION"}
        env.update(TAR2TF_CACHE=str(cache), TAR2TF_FLINK_JOB_SERVER_JAR=str(jar), **extra)
        p = subprocess.run(["bash", step], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        lines = dict(line.split("=", 1) for line in (cache / "flink.env").read_text().split())
        assert lines["FLINK_JOB_SERVER_JAR"] == str(jar)
        return lines["FLINK_VERSION"]

    assert version() == "1.19"
    assert version(TAR2TF_FLINK_VERSION="1.18") == "1.18"
