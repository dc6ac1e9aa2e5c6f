"""Which driver runs a job, seen from the processes that did the work.  With no runner
flag, ``tar2tf convert`` and ``Dataset.load(path=...)`` run the in-process driver, whose
own worker processes (``pipelines.inprocess.worker``) convert; ``--runner inprocess``
(alias ``local``) names it.
``--runner beam`` (or any Beam option) runs Beam's local runner, whose SDK worker
processes (``pipelines.beam.sdk_worker``) convert and no tar2tf worker starts.  Both write
the same bytes (the golden digests pin them for more jobs).  ``tar2tf pcr`` runs on
threads of this process unless given Beam options."""

import os
import subprocess
import sys
import time

import pytest
from conftest import DEFAULT_MODE_ENV
from support import shardgen
from support.cli_fixtures import ROOT, cli, output_digest

from pipelines.beam import options as opts

LOCAL_WORKER = "pipelines.inprocess.worker"
BEAM_WORKER = "pipelines.beam.sdk_worker"
DEMO = os.path.join(ROOT, "launch", "demo", "shards")


def _who_converted(pid_dir):
    """The command lines of the processes that ran the op, by pid."""
    out = {}
    for name in os.listdir(pid_dir):
        with open(os.path.join(pid_dir, name), "rb") as f:
            out[int(name)] = f.read().replace(b"\0", b" ").decode()
    return out


def _only(runs, worker):
    return bool(runs) and all(worker in cmd for cmd in runs.values())


@pytest.mark.slow
def test_no_flag_runs_in_process_and_runner_beam_runs_beams_local_runner(tmp_path):
    shardgen.make_shards(str(tmp_path / "in"), 4, 5, size=(24, 16))
    src = str(tmp_path / "in" / "train-{0000..0003}.tar")
    runs = {}
    for name, flags in (
        ("default", ["--processes", "2"]),
        ("inprocess", ["--runner", "inprocess", "--processes", "2"]),
        ("beam", ["--runner", "beam", "--processes", "2"]),
    ):
        pid_dir = tmp_path / f"pids-{name}"
        pid_dir.mkdir()
        env = {
            **DEFAULT_MODE_ENV,  # Beam's local runner as a user gets it: worker processes
            "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]),
            "TAR2TF_TEST_PID_DIR": str(pid_dir),
        }
        p = cli(
            "convert",
            src,
            "--output",
            str(tmp_path / name / "t-{}.record"),
            "--records-per-shard",
            "6",
            "--ops",
            "support.slow_ops:pid_ops",
            "--no-progress",
            *flags,
            env=env,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        runs[name] = _who_converted(pid_dir)
    digests = {name: output_digest(str(tmp_path / name)) for name in runs}
    assert digests["default"] == digests["inprocess"] == digests["beam"]
    # the in-process driver's own worker processes ran the op, with or without the flag
    assert _only(runs["default"], LOCAL_WORKER), runs["default"]
    assert _only(runs["inprocess"], LOCAL_WORKER), runs["inprocess"]
    # Beam's SDK workers ran it: no tar2tf worker process, and not the launching CLI
    assert _only(runs["beam"], BEAM_WORKER), runs["beam"]


@pytest.mark.parametrize(
    "args, shuffle, in_process",
    [
        ([], False, True),
        (["--runner", "inprocess"], False, True),
        (["--runner=InProcess"], False, True),
        (["--runner", "local"], False, True),  # the alias
        (["--runner=LOCAL"], False, True),
        ([], True, False),  # only the Beam graph shuffles
        (["--runner", "beam"], False, False),
        (["--runner=DirectRunner"], False, False),
        (["--runner=FlinkRunner", "--flink_master=[local]"], False, False),
        (["--runner=DataflowRunner", "--project=p"], False, False),
        (["--runner=PortableRunner"], False, False),
        (["--direct_num_workers=2"], False, False),
        (["--direct_running_mode=multi_threading"], False, False),
    ],
)
def test_which_driver(args, shuffle, in_process):
    assert opts.in_process(args, shuffle) is in_process


def test_runner_beam_and_direct_runner_are_the_local_runner_with_worker_processes(monkeypatch):
    monkeypatch.delenv(opts.MODE_ENV, raising=False)
    want = [opts.LOCAL_RUNNER, "--direct_running_mode=multi_processing", "--direct_num_workers=3"]
    assert opts.effective_args([], workers=3) == want
    for name in ("beam", "Beam", "DirectRunner"):
        assert opts.effective_args(["--runner", name], workers=3) == want
        assert opts.effective_args([f"--runner={name}"], workers=3) == want
    # the user's own settings stay
    assert opts.effective_args(["--runner=beam", "--direct_num_workers=1"]) == [
        opts.LOCAL_RUNNER,
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=1",
    ]


@pytest.mark.parametrize(
    "flags, says",
    [
        (
            ["--runner", "inprocess", "--direct_num_workers=2"],
            "tar2tf: --direct_num_workers=2: Beam pipeline option(s), which --runner inprocess",
        ),
        (
            ["--runner=local", "--runner=local", "--job_name", "x"],
            "tar2tf: --job_name x: Beam pipeline option(s), which --runner local",
        ),
        (["--runner", "local", "--shuffle"], "tar2tf convert: --shuffle needs the Beam graph"),
        (
            ["--runner", "local", "--max-shard-szie", "3"],
            "tar2tf: unrecognized arguments: --max-shard-szie 3",
        ),
    ],
)
def test_runner_local_with_what_only_beam_does_is_a_usage_error(tmp_path, flags, says):
    out = tmp_path / "o"
    p = cli("convert", os.path.join(DEMO, "demo-0.tar"), "-o", str(out / "d-{}.record"), *flags)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith(says), p.stderr
    assert not out.exists()


@pytest.mark.slow
def test_dataset_load_path_runs_in_process_unless_given_beam_args(tmp_path, monkeypatch):
    from support.slow_ops import note_pid

    from pipelines import Dataset
    from transforms.ops import Decode, Func, Resize

    shardgen.make_shards(str(tmp_path / "in"), 4, 5, size=(24, 16))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    monkeypatch.setenv(opts.MODE_ENV, "")  # Beam's local runner as a user gets it
    ops = [Decode("jpg"), Resize("jpg", (8, 8)), Func(note_pid)]
    runs, paths = {}, {}
    for name, beam_args in (("default", []), ("beam", ["--runner=beam"])):
        pid_dir = tmp_path / f"pids-{name}"
        pid_dir.mkdir()
        monkeypatch.setenv("TAR2TF_TEST_PID_DIR", str(pid_dir))
        paths[name] = Dataset(str(tmp_path / "in"), conversions=ops, beam_args=beam_args).load(
            "train-{0000..0003}.tar",
            path=str(tmp_path / name / "t-{}.record"),
            records_per_shard=6,
            num_workers=2,
        )
        runs[name] = _who_converted(pid_dir)
    assert _only(runs["default"], LOCAL_WORKER), runs["default"]
    assert _only(runs["beam"], BEAM_WORKER), runs["beam"]
    assert output_digest(str(tmp_path / "default")) == output_digest(str(tmp_path / "beam"))
    assert len(paths["default"]) == len(paths["beam"]) == 4
    with pytest.raises(ValueError, match="--runner=local, the in-process driver, which takes no"):
        Dataset(str(tmp_path / "in"), beam_args=["--runner=local", "--job_name=x"]).load(
            "train-0000.tar", path=str(tmp_path / "x" / "t.record")
        )


def _descendants(pid):
    """The command lines of ``pid``'s live descendant processes (from /proc)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # the name (field 2) may hold spaces: the fields after its ")" are fixed
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for child, ppid in parent.items():
            if ppid == p:
                todo.append(child)
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        found.append(f.read().replace(b"\0", b" ").decode())
                except OSError:
                    pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process tree from /proc")
@pytest.mark.slow
def test_pcr_runs_in_this_process_unless_given_beam_options(tmp_path):
    """Watched while the job runs: no flag and ``--runner local`` start no Beam worker
    process (jpegtran's are the only children); ``--runner beam`` does.  Same bytes."""
    env = dict(os.environ, **DEFAULT_MODE_ENV, TF_CPP_MIN_LOG_LEVEL="3")
    seen = {}
    for name, flags in (
        ("default", []),
        ("local", ["--runner", "local"]),
        ("beam", ["--runner", "beam"]),
    ):
        cmd = [sys.executable, "-m", "launch.cli", "pcr", os.path.join(DEMO, "demo-{0..3}.tar")]
        cmd += ["-o", str(tmp_path / name), "--images-per-record", "7", "--no-progress", *flags]
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        cmds = set()
        while p.poll() is None:
            cmds.update(_descendants(p.pid))
            time.sleep(0.05)
        err = p.stderr.read()
        assert p.returncode == 0, err[-2000:]
        seen[name] = cmds
    assert not any(BEAM_WORKER in c for c in seen["default"] | seen["local"]), seen
    assert any(BEAM_WORKER in c for c in seen["beam"]), seen["beam"]

    def files(name):
        d = tmp_path / name
        return {n: (d / n).read_bytes() for n in os.listdir(d) if n.startswith("PCR_")}

    assert files("default") == files("local") == files("beam")


@pytest.mark.parametrize(
    "argv, driver, runner",
    [
        (["convert", "x.tar", "-o", "o/t-{}.record"], "in-process", "inprocess"),
        (
            ["convert", "x.tar", "-o", "o/t-{}.record", "--runner", "inprocess"],
            "in-process",
            "inprocess",
        ),
        (
            ["convert", "x.tar", "-o", "o/t-{}.record", "--runner", "local"],
            "in-process",
            "inprocess",
        ),
        (["convert", "x.tar", "-o", "o/t-{}.record", "--runner", "beam"], "beam", "FnApiRunner"),
        (["convert", "x.tar", "-o", "o/t-{}.record", "--shuffle"], "beam", "FnApiRunner"),
        (
            ["convert", "x.tar", "-o", "o/t-{}.record", "--runner=FlinkRunner"],
            "beam",
            "FlinkRunner",
        ),
        (["pcr", "x", "-o", "o"], "in-process", "inprocess"),
        (["pcr", "x", "-o", "o", "--runner", "beam"], "beam", "FnApiRunner"),
    ],
)
def test_dry_run_says_which_driver_the_cli_would_run(argv, driver, runner):
    """launch/flink.sh and launch/dataflow.sh --dry-run print what launch.dry_run
    finds; their --runner keeps them on Beam."""
    from launch.dry_run import describe

    d = describe(argv)
    assert (d["driver"], d["runner"]) == (driver, runner)
