"""tar2tf on a real Flink session cluster: a JobManager and two TaskManagers (separate JVMs)
with Beam's Python SDK workers started by a worker pool (launch/flink/), jobs
submitted through launch/flink.sh.  The conversion is spread over both TaskManagers; a
TaskManager or an SDK worker killed mid-job costs a restart, not a byte of the output;
everything is stopped by PID at the end.  The reference for every output is the same
job on the default local runner."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from support import flink_cluster_fixtures as F
from support.cli_fixtures import ROOT, cli, output_digest
from support.pcr_fixtures import make_image_folder, requires_jpegtran, sample_images

from launch.flink import cluster as flink_cluster
from launch.flink import jvm as flink_jvm
from launch.flink import procs as flink_procs

pytestmark = [pytest.mark.flink, pytest.mark.slow]

# decode -> resize 32 -> encode, the conversion the issue names
RESIZE_OPS = '{conversions: ["Encode(Resize(Decode(jpg), (32, 32)), jpeg, quality=90)"]}'
TF_ARGS = ("--type-map", "cls:int64", "--records-per-shard", "10")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """8 input shards of 6 JPEG + label records."""
    from support import shardgen

    d = tmp_path_factory.mktemp("cluster-in")
    shardgen.make_shards(str(d), 8, 6, size=(64, 48))
    return str(d) + "/train-{0000..0007}.tar"


@pytest.fixture(scope="module")
def slow_shards(tmp_path_factory):
    """8 shards of 30 records, for jobs slow enough (tests/support/slow_ops.py) to kill mid-way."""
    from support import shardgen

    d = tmp_path_factory.mktemp("cluster-slow-in")
    shardgen.make_shards(str(d), 8, 30, size=(32, 24))
    return str(d) + "/train-{0000..0007}.tar"


@pytest.fixture(scope="module")
def slow_reference(slow_shards, tmp_path_factory):
    """The slow job's output on the local runner (no delay: the op passes records through)."""
    out = tmp_path_factory.mktemp("slow-local")
    p = cli(
        "convert",
        slow_shards,
        "-o",
        str(out / "s-{}.record"),
        *TF_ARGS,
        "--ops",
        "support.slow_ops:slow_ops",
        "--no-progress",
        env={"PYTHONPATH": F.TESTS, "TAR2TF_TEST_DELAY": "0"},
    )
    assert p.returncode == 0, p.stderr
    return str(out)


def _spread(cluster, jid, vertex_word):
    """The vertex whose name holds `vertex_word` ran at parallelism 2, on both TaskManagers."""
    vertices = [v for v in cluster.vertex_taskmanagers(jid).values() if vertex_word in v["name"]]
    assert vertices, [v["name"] for v in cluster.vertex_taskmanagers(jid).values()]
    for v in vertices:
        assert v["parallelism"] == 2, v
        assert len(v["taskmanagers"]) == 2, v


def test_pool_python_without_beam_is_refused(tmp_path, flink_cluster_setup):
    """A pool whose python lacks apache_beam would leave every Flink job waiting for SDK
    workers that die at import: start refuses with one clear message, before any JVM."""
    bare = tmp_path / "bare"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120
    )
    ports = F.free_ports(3)
    with pytest.raises(flink_procs.ClusterError) as e:
        flink_cluster.start(
            str(tmp_path / "state"),
            flink_cluster_setup["FLINK_DIST"],
            rest_port=ports[0],
            rpc_port=ports[1],
            pool_port=ports[2],
            pool_python=str(bare / "bin" / "python"),
        )
    assert "cannot run tar2tf's DoFns" in str(e.value) and "No module named 'apache_beam'" in str(
        e.value
    )
    assert flink_procs.load(str(tmp_path / "state")) is None  # nothing was started


def test_the_pool_is_started_like_every_other_worker(tmp_path):
    """The shared worker pool runs as ``python -P -c`` (pipelines.worker_python), not
    ``python -m``, which would put the current directory first on its path; the PID check
    recognises it by its command line, and stopping ends it.  No JVM needed."""
    from launch.flink import pool as flink_pool
    from pipelines.worker_python import safe_path_flags

    (port,) = F.free_ports(1)
    state = str(tmp_path / "state")
    st = {"logs": str(tmp_path), "procs": {}, "pool_port": port, "pool_python": sys.executable}
    os.makedirs(state)
    proc = flink_pool.start_pool(st, state)
    try:
        deadline = time.time() + 120
        while not flink_procs.connects(port):
            assert flink_procs.alive(proc) and time.time() < deadline, open(proc["out"]).read()
            time.sleep(0.2)
        with open(f"/proc/{proc['pid']}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert argv[1 : 2 + len(safe_path_flags())] == [
            *(a.encode() for a in safe_path_flags()),
            b"-c",
        ], argv
        assert flink_procs.alive(proc)
        assert not flink_procs.alive(dict(proc, marker=f"--service_port={port + 1}"))
    finally:
        flink_procs.stop_procs([proc])
    assert not flink_procs.alive(proc)


def test_tfrecords_spread_over_both_taskmanagers(session_cluster, shards, tmp_path):
    def args(d):
        return (shards, "-o", str(tmp_path / d / "t-{}.record"), *TF_ARGS, "--ops", RESIZE_OPS)

    p = session_cluster.run(
        "convert", *args("flink"), "--summary-json", str(tmp_path / "summary.json")
    )
    assert p.returncode == 0, p.stderr[-5000:]
    jid = session_cluster.job_id(p.stderr)
    assert session_cluster.wait_job(jid)["state"] == "FINISHED"
    _spread(session_cluster, jid, "ConvertShard")
    local = cli("convert", *args("local"), "--no-progress")
    assert local.returncode == 0, local.stderr
    got = output_digest(str(tmp_path / "flink"))
    assert (
        got == output_digest(str(tmp_path / "local")) and len(got) == 7
    )  # 5 shards, manifest, rejects
    rep = json.load(open(tmp_path / "summary.json"))
    assert rep["counters"]["records_written"] == 48 and rep["counter_mismatches"] == []


@requires_jpegtran
def test_pcr_spread_over_both_taskmanagers(session_cluster, tmp_path):
    folder = make_image_folder(str(tmp_path / "folder"), sample_images())
    args = ("--images-per-record", "4", "--seed", "5")
    p = session_cluster.run("pcr", folder, "--output", str(tmp_path / "flink"), *args)
    assert p.returncode == 0, p.stderr[-5000:]
    jid = session_cluster.job_id(p.stderr)
    assert session_cluster.wait_job(jid)["state"] == "FINISHED"
    vertices = session_cluster.vertex_taskmanagers(jid).values()
    assert any(v["parallelism"] == 2 and len(v["taskmanagers"]) == 2 for v in vertices), list(
        vertices
    )
    local = cli("pcr", folder, "--output", str(tmp_path / "local"), *args, "--no-progress")
    assert local.returncode == 0, local.stderr
    got = output_digest(str(tmp_path / "flink"))
    assert got == output_digest(str(tmp_path / "local")) and "PCR_index.pb" in got


@pytest.mark.ais
def test_ais_to_ais_on_the_cluster(session_cluster, ais_cluster, shards, tmp_path):
    """Input from the aisnode's bucket, output to another prefix of it, read and written
    by the SDK workers themselves; the local runner's objects are the same bytes."""
    import glob

    bucket = ais_cluster.new_bucket("fc")
    for path in sorted(glob.glob(os.path.dirname(shards) + "/*.tar")):
        ais_cluster.put(bucket, "in/" + os.path.basename(path), open(path, "rb").read())
    src = f"ais://{bucket}/in/train-{{0000..0007}}.tar"
    common = (*TF_ARGS, "--ops", RESIZE_OPS, "--ais-endpoint", ais_cluster.endpoint)
    p = session_cluster.run("convert", src, "-o", f"ais://{bucket}/flink/t-{{}}.record", *common)
    assert p.returncode == 0, p.stderr[-5000:]
    assert session_cluster.wait_job(session_cluster.job_id(p.stderr))["state"] == "FINISHED"
    local = cli(
        "convert", src, "-o", f"ais://{bucket}/local/t-{{}}.record", *common, "--no-progress"
    )
    assert local.returncode == 0, local.stderr
    mf = json.loads(
        ais_cluster.get(bucket, "flink/t.record.manifest.json")
        .decode()
        .replace("/flink/", "/local/")
    )
    ml = json.loads(ais_cluster.get(bucket, "local/t.record.manifest.json"))
    names = [s["path"].rsplit("/", 1)[-1] for s in ml["shards"]] + ["t.record.rejects.jsonl"]
    assert len(names) == 6
    for n in names:
        assert ais_cluster.get(bucket, f"flink/{n}") == ais_cluster.get(bucket, f"local/{n}"), n
    assert mf["shards"] == ml["shards"] and mf["totals"] == ml["totals"]


def _kill_mid_job(cluster, slow_shards, tmp_path, victim):
    """Runs the slow job, calls victim() once two input shards are converted and before
    the last, and returns (the CLI's exit code, its output, the output directory)."""
    out = tmp_path / "out"
    log = str(tmp_path / "cli.log")
    proc = cluster.popen(
        "convert",
        slow_shards,
        "-o",
        str(out / "s-{}.record"),
        *TF_ARGS,
        "--ops",
        "support.slow_ops:slow_ops",
        log=log,
    )
    try:
        F.wait_for(
            lambda: F.pieces_done(str(out)) >= 2, 300, "two converted input shards", proc, log
        )
        assert F.pieces_done(str(out)) < 8, (
            "the job converted everything before the kill: make it slower"
        )
        victim()
        rc = proc.wait(timeout=400)
    finally:
        F.end_group(proc)
    return rc, open(log).read(), str(out)


def _same_as_reference(out, reference, text):
    assert output_digest(out) == output_digest(reference), text[-5000:]
    # nothing else is left: no temp file beside the final names, no work directory
    assert sorted(F.files_under(out)) == sorted(F.files_under(reference))
    m = json.load(open(os.path.join(out, "s.record.manifest.json")))
    # every record read was written once: 8 shards x 30, none rejected, none twice
    assert m["totals"]["records_written"] == 240 and m["rejects"]["count"] == 0
    assert sum(s["records"] for s in m["shards"]) == 240


def test_taskmanager_killed_mid_job(session_cluster, slow_shards, slow_reference, tmp_path):
    """kill -9 of a TaskManager JVM while the conversion runs, then a replacement: the job
    restarts (fixed-delay strategy, 8 s heartbeat timeout) and finishes with the
    uninterrupted run's bytes."""
    c = session_cluster
    tms = sorted(n for n in c.procs if n.startswith("tm") and flink_procs.alive(c.procs[n]))

    def kill_tm():
        os.kill(c.procs[tms[0]]["pid"], signal.SIGKILL)
        flink_cluster.add_taskmanager(c.state)

    rc, text, out = _kill_mid_job(c, slow_shards, tmp_path, kill_tm)
    assert rc == 0, text[-5000:]
    job = c.wait_job(c.job_id(text))
    assert (
        job["state"] == "FINISHED" and job["timestamps"]["RESTARTING"] > 0
    )  # the kill cost a restart
    _same_as_reference(out, slow_reference, text)


def test_sdk_worker_killed_mid_job(session_cluster, slow_shards, slow_reference, tmp_path):
    """kill -9 of an SDK worker process: its task fails, Flink restarts the job, the pool
    starts new workers, and the job finishes with the uninterrupted run's bytes."""
    c = session_cluster

    def kill_worker():
        workers = c.sdk_workers()
        assert workers, "no SDK worker running"
        os.kill(workers[0], signal.SIGKILL)

    rc, text, out = _kill_mid_job(c, slow_shards, tmp_path, kill_worker)
    assert rc == 0, text[-5000:]
    job = c.wait_job(c.job_id(text))
    assert job["state"] == "FINISHED" and job["timestamps"]["RESTARTING"] > 0
    _same_as_reference(out, slow_reference, text)


def test_a_launcher_killed_mid_job_leaves_a_job_that_writes_nothing_without_its_lock(
    session_cluster, slow_shards, tmp_path
):
    """kill -9 of the launcher: the Flink job runs on without it (docs/runners.md).  Then
    another job takes the output's lock (the dead launcher's is taken over): the orphan's
    workers read the lock again before the first final shard and stop, so it writes no
    final shard and no manifest, and ends failed."""
    from pipelines.job import output_lock
    from transforms.stores import StoreConfig

    c = session_cluster
    out = tmp_path / "out"
    output = str(out / "s-{}.record")
    log = str(tmp_path / "cli.log")
    proc = c.popen(
        "convert",
        slow_shards,
        "-o",
        output,
        *TF_ARGS,
        "--ops",
        "support.slow_ops:slow_ops",
        log=log,
    )
    lock = None
    try:
        F.wait_for(
            lambda: F.pieces_done(str(out)) >= 2, 300, "two converted input shards", proc, log
        )
        jid = c.job_id(open(log).read())
        os.kill(proc.pid, signal.SIGKILL)  # the launcher alone: no cancel, no clean-up
        proc.wait(timeout=30)
        assert c.rest(f"/jobs/{jid}")["state"] == "RUNNING"
        lock = output_lock.acquire(
            output_lock.lock_url_for(output), StoreConfig(), output=output, command="convert"
        )
        job = c.wait_job(jid, timeout=500)
        assert job["state"] == "FAILED", job["state"]
    finally:
        F.end_group(proc)
        # the killed launcher's job server lives on in its process group: end it too, or
        # it outlives the cluster
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if lock is not None:
            lock.release()
    left = sorted(os.listdir(out))
    assert not [n for n in left if n.endswith(".record") or "manifest" in n], left


def test_stop_ends_every_process_by_pid(session_cluster):
    """launch/flink-cluster.sh stop: the JobManager, every TaskManager (the killed one is
    already gone), the pool and its workers end; no job server of these runs is left."""
    c = session_cluster
    procs = dict(c.procs)
    workers = c.sdk_workers()
    assert {"jobmanager", "pool"} <= set(procs) and sum(n.startswith("tm") for n in procs) >= 2
    # each TaskManager keeps its blobs in this cluster's state, not in a /tmp directory
    # that outlives it (where earlier clusters' artifacts slowed every start to minutes)
    work = os.path.join(os.path.abspath(c.state), "work")
    for name in (n for n in procs if n.startswith("tm")):
        with open(os.path.join(c.state, "log", f"{name}.log")) as f:
            assert f"WorkingDirectory({work}{os.sep}" in f.read(), name
    assert os.listdir(work)
    p = subprocess.run(
        ["bash", os.path.join(ROOT, "launch", "flink-cluster.sh"), "--state", c.state, "stop"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TAR2TF_PYTHON=sys.executable),
    )
    assert p.returncode == 0 and re.search(r"stopped: .*jobmanager", p.stderr), p.stderr
    assert not any(flink_procs.alive(pr) for pr in procs.values())
    import psutil

    assert not [
        w for w in workers if psutil.pid_exists(w) and psutil.Process(w).status() != "zombie"
    ]
    assert c.job_servers() == []
    assert flink_jvm.overview(c.rest_port) is None
    assert not os.path.exists(work) and os.path.isdir(os.path.join(c.state, "log"))
