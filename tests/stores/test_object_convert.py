"""convert() with shards read from and written to ais:// and gs:// (real aisnode and
fake-gcs-server on loopback): same bytes as a local run, atomic outputs, the Beam work
dir beside the output, faults retried without changing a byte, 404/403 as rejects."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import google_crc32c
import pytest
from support import shardgen
from support.objstore_fixtures import BEAM, N_SHARDS, OPTS, PER_SHARD
from support.pool_spy import pool_starts

from pipelines.beam.convert import convert
from pipelines.job import names
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.refused import OutputExistsError
from transforms.stores import StoreConfig, get_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _upload(backend, paths):
    for p in paths:
        backend.put("in/" + os.path.basename(p), open(p, "rb").read())


def _outputs(backend, res):
    store = get_store(res.paths[0], backend.config())
    return [store.read_bytes(p) for p in res.paths]


def test_convert_from_and_to_object_store_matches_local_run(backend, local_run):
    paths, ref_shards, ref_totals = local_run.paths, local_run.shards, local_run.manifest["totals"]
    _upload(backend, paths)
    cfg = backend.config()
    output = backend.url("out/train-{}.record")
    res = convert(
        ConvertConfig(
            sources=backend.url("in/train-{0000..0002}.tar"),
            output=output,
            store=cfg,
            progress=False,
            **OPTS,
        ),
        BEAM,
    )
    assert res.exit_code == 0
    assert res.paths == [backend.url(f"out/train-{i + 1}.record") for i in range(len(ref_shards))]
    assert _outputs(backend, res) == ref_shards
    assert res.manifest["totals"] == ref_totals
    store = get_store(output, cfg)
    # manifest and rejects beside the output, in the bucket; the work dir is gone
    manifest = json.loads(store.read_bytes(backend.url("out/train.record.manifest.json")))
    assert [s["crc32c"] for s in manifest["shards"]] == [
        f"{google_crc32c.value(b):08x}" for b in ref_shards
    ]
    if backend.scheme == "gs":  # the manifest's digest is the one GCS keeps for the object
        bucket = backend.server.client().bucket(backend.bucket)
        kept = [
            base64.b64decode(bucket.get_blob(s["path"].split("/", 3)[3]).crc32c).hex()
            for s in manifest["shards"]
        ]
        assert kept == [s["crc32c"] for s in manifest["shards"]]
    assert store.read_bytes(backend.url("out/train.record.rejects.jsonl")) == b""
    assert list(store.list(backend.url("out/.tar2tf-work/"))) == []
    assert sorted(names.existing_outputs(output, cfg)) == sorted(res.paths)
    with pytest.raises(OutputExistsError):
        convert(
            ConvertConfig(
                sources=backend.url("in/train-{0000..0002}.tar"),
                output=output,
                store=cfg,
                progress=False,
                **OPTS,
            ),
            BEAM,
        )


def _fail_in_last_shard(record):
    """Passes records through; with TAR2TF_TEST_FAIL set, fails in the last input shard
    (after a second, so that the stream has journaled the shards before it)."""
    import time

    if os.environ.get("TAR2TF_TEST_FAIL") and record["__shard__"].endswith("train-0002.tar"):
        time.sleep(1.0)
        raise SystemExit(1)  # ends the worker process, as a crash in native code would
    return record


@pytest.mark.slow
def test_resume_continues_after_the_journaled_shards_in_the_bucket(
    backend, local_run, monkeypatch, caplog
):
    """A job writing to a bucket fails midway (a worker process dies): the final shards it
    finished stay there, journaled in the bucket's work dir, and a rerun with resume=True
    converts only the rest into the same bytes as an uninterrupted run."""
    from transforms.ops import Func

    paths, ref_shards, ref_totals = local_run.paths, local_run.shards, local_run.manifest["totals"]
    _upload(backend, paths)
    cfg = backend.config()
    output = backend.url("resumed/train-{}.record")

    def run(**kw):  # the in-process driver streams final shards (and journals them)
        from pipelines.inprocess.driver import convert_in_process

        return convert_in_process(
            ConvertConfig(
                sources=backend.url("in/train-{0000..0002}.tar"),
                output=output,
                store=cfg,
                sample_stages=(Func(_fail_in_last_shard),),
                progress=False,
                processes=2,
                **OPTS,
                **kw,
            ),
            num_workers=2,
        )

    backend.keep_crc32c()  # as GCS always does: journaled shards are checked without a download
    monkeypatch.setenv("TAR2TF_TEST_FAIL", "1")
    with pytest.raises(Exception, match="died with exit code 1"):
        run()
    monkeypatch.delenv("TAR2TF_TEST_FAIL")
    store = get_store(output, cfg)
    real_open_read = type(store).open_read
    journal = [u for u in store.list(backend.url("resumed/.tar2tf-work/")) if "/journal-" in u]
    kept = names.existing_outputs(output, cfg)
    assert journal and sorted(kept) == [
        backend.url(f"resumed/train-{i + 1}.record") for i in range(len(journal))
    ]
    with pytest.raises(OutputExistsError, match="resume=True to continue it"):
        run()
    with monkeypatch.context() as m, caplog.at_level("INFO", logger="tar2tf"):
        m.setattr(
            type(store),
            "open_read",
            lambda self, url: (
                pytest.fail(f"{url} read back")
                if "/resumed/train-" in url
                else real_open_read(self, url)
            ),
        )
        res = run(resume=True)
    assert f"resumed: {len(journal)} final shard(s) of an interrupted run kept" in caplog.text
    assert res.exit_code == 0 and res.counters["shards_resumed"] >= 1
    assert _outputs(backend, res) == ref_shards and res.manifest["totals"] == ref_totals
    assert list(store.list(backend.url("resumed/.tar2tf-work/"))) == []


def test_convert_under_faults_gives_identical_output(backend, local_run):
    paths, ref_shards, ref_totals = local_run.paths, local_run.shards, local_run.manifest["totals"]
    _upload(backend, paths)
    cfg = backend.config(retry_attempts=8)
    data, front = backend.data, backend.front
    for i in range(N_SHARDS):  # every input shard's stream is broken at least once
        shard = backend.obj_re(f"in/train-{i:04d}.tar")
        data.add("truncate", method="GET", path=shard, after=3000 + 500 * i)
        data.add("reset", method="GET", path=shard, after=1000)
        data.add("status", method="GET", path=shard, status=503)
    data.add(
        "status", method="GET", path=r"piece-\d+\.tfrecord", status=500, times=2
    )  # reading pieces back
    data.add("status", method=backend.put_method, status=503, times=3)  # uploads of pieces/shards
    data.add("reset", method=backend.put_method, times=1)
    front.add("status", method="GET", path=backend.list_re(), status=429, times=1)  # a listing
    data.add("slow", method="GET", path=backend.obj_re("in/train-0001.tar"), delay=0.3, times=1)
    res = convert(
        ConvertConfig(
            sources=backend.url("in/train-{0000..0002}.tar"),
            store=cfg,
            output=backend.url("faulty/train-{}.record"),
            progress=False,
            **OPTS,
        ),
        BEAM,
    )
    assert data.faults() + front.faults() >= 3 * N_SHARDS + 5
    assert res.exit_code == 0 and res.manifest["rejects"]["count"] == 0
    assert _outputs(backend, res) == ref_shards
    assert res.manifest["totals"] == ref_totals


def test_missing_and_forbidden_shards_are_rejects_without_retry(backend, local_run):
    paths, _, _ = local_run
    _upload(backend, paths[:1])
    backend.put("in/forbidden.tar", open(paths[1], "rb").read())
    rule = backend.data.add(
        "status", method="GET", path=backend.obj_re("in/forbidden.tar"), status=403, times=100
    )
    cfg = backend.config()
    res = convert(
        ConvertConfig(
            sources=backend.url("in/{train-0000,missing,forbidden}.tar"),
            store=cfg,
            output=backend.url("rej/train.record"),
            max_rejects=5,
            progress=False,
            **OPTS,
        ),
        BEAM,
    )
    assert rule.fired == 1  # 403 is final: asked once
    rejects = [
        json.loads(line)
        for line in get_store(res.rejects_path, cfg)
        .read_bytes(res.rejects_path)
        .decode()
        .splitlines()
    ]
    assert {(r["shard"], r["stage"], r["reason"].split(":")[0]) for r in rejects} == {
        (backend.url("in/missing.tar"), "list", "missing shard"),
        (backend.url("in/forbidden.tar"), "fetch", "permission denied"),
    }
    t = res.manifest["totals"]
    assert t["records_written"] == PER_SHARD and t["shards_rejected"] == 2 and res.exit_code == 0
    assert all(
        p.startswith(backend.url("rej/train-")) and p.endswith(f"-of-{len(res.paths):05d}.record")
        for p in res.paths
    )


def test_cli_with_ais_endpoint_and_retry_flags(ais_cluster, local_run, tmp_path):
    paths, ref_shards, _ = local_run
    bucket = ais_cluster.new_bucket()
    for p in paths:
        ais_cluster.put(bucket, "in/" + os.path.basename(p), open(p, "rb").read())
    secret = "secret-" + os.urandom(6).hex()
    env = {k: v for k, v in os.environ.items() if k != "AIS_ENDPOINT"}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", AIS_AUTHN_TOKEN=secret)
    args = [
        sys.executable,
        "-m",
        "launch.cli",
        "--verbose",
        "convert",
        f"ais://{bucket}/in/train-{{0000..0002}}.tar",
        "--output",
        f"ais://{bucket}/cli/train-{{}}.record",
        "--max-shard-size",
        "5KB",
        "--type-map",
        "cls:int64",
        "--ais-endpoint",
        ais_cluster.endpoint,
        "--retry-attempts",
        "3",
        "--retry-initial",
        "0.05",
        "--retry-max",
        "0.5",
        "--retry-total",
        "20",
        "--read-timeout",
        "10",
        "--no-progress",
        *BEAM,
    ]
    p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [
        f"ais://{bucket}/cli/train-{i + 1}.record" for i in range(len(ref_shards))
    ]
    assert [
        ais_cluster.get(bucket, f"cli/train-{i + 1}.record") for i in range(len(ref_shards))
    ] == ref_shards
    assert secret not in p.stdout + p.stderr
    bad = subprocess.run(
        args + ["--retry-attempts", "0"], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert bad.returncode == 2 and "retry" in bad.stderr


def test_in_process_one_worker_to_a_bucket_keeps_a_converter_thread(
    backend, local_run, monkeypatch
):
    """The in-process driver with num_workers=1 writing to ais:// or gs://: the shards
    convert on a thread of their own (the next fetch overlaps the upload; only a local
    output converts on the caller's thread), into the bytes of the local Beam run."""
    import threading

    from pipelines.inprocess.driver import convert_in_process
    from pipelines.job.kinds.tfrecord import kind as cv

    paths, ref_shards, ref_totals = local_run.paths, local_run.shards, local_run.manifest["totals"]
    _upload(backend, paths)
    threads = []
    real = cv.convert_to_piece
    monkeypatch.setattr(
        cv, "convert_to_piece", lambda *a: (threads.append(threading.current_thread()), real(*a))[1]
    )
    res = convert_in_process(
        ConvertConfig(
            sources=backend.url("in/train-{0000..0002}.tar"),
            output=backend.url("inproc/train-{}.record"),
            store=backend.config(),
            progress=False,
            processes=0,
            **OPTS,
        ),
        num_workers=1,
    )
    assert res.exit_code == 0 and res.totals == ref_totals
    assert len(threads) == N_SHARDS and threading.current_thread() not in threads
    assert _outputs(backend, res) == ref_shards


def test_in_process_two_workers_read_a_bucket_into_local_shards(
    backend, local_run, tmp_path, monkeypatch
):
    """A passthrough from ais:// or gs:// to a local '{}' output with num_workers=2 (no
    heavy ops): two worker processes fetch the shards from the store and write into the
    final shards themselves, into the local run's bytes."""
    from pipelines.inprocess.driver import convert_in_process

    paths, ref_shards, ref_totals = local_run.paths, local_run.shards, local_run.manifest["totals"]
    _upload(backend, paths)
    started = pool_starts(monkeypatch)
    res = convert_in_process(
        ConvertConfig(
            sources=backend.url("in/train-{0000..0002}.tar"),
            output=str(tmp_path / "o" / "train-{}.record"),
            store=backend.config(),
            progress=False,
            **OPTS,
        ),
        num_workers=2,
    )
    assert started == [2]
    assert res.exit_code == 0 and res.totals == ref_totals
    assert [open(p, "rb").read() for p in res.paths] == ref_shards


@pytest.mark.parametrize("scheme,processes", [("gs", "2"), ("gs", "0"), ("ais", "2")])
@pytest.mark.slow
def test_many_small_shards_to_a_bucket_fit_in_a_small_descriptor_limit(
    request, tmp_path, scheme, processes
):
    """600 one-record shards written to gs:// or ais:// under a limit of 256 open files:
    each waits for the one upload thread in a local spool file, and a waiting spool file
    holds no descriptor (EMFILE before: every waiting shard's spool file stayed open).
    Straight to the servers: through the fault proxies 600 uploads take minutes."""
    import resource

    shardgen.make_shards(str(tmp_path / "d"), 1, 600, size=(16, 16))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if scheme == "gs":
        server = request.getfixturevalue("gcs_emulator")
        env["STORAGE_EMULATOR_HOST"] = server.url
        cfg, flags = StoreConfig(), []
    else:
        server = request.getfixturevalue("ais_cluster")
        cfg, flags = StoreConfig(ais_endpoint=server.endpoint), ["--ais-endpoint", server.endpoint]
    out = f"{scheme}://{server.new_bucket()}/many/"

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.cli",
            "convert",
            str(tmp_path / "d" / "train-0000.tar"),
            "-o",
            out + "t-{}.record",
            *flags,
            "--no-progress",
            "--records-per-shard",
            "1",
            "--runner",
            "local",
            "--processes",
            processes,
            "--ops",
            '{conversions: ["Resize(jpg, (8, 8))"]}',
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-1500:]
    if scheme == "gs":
        names = [
            f"{out}{b.name[len('many/') :]}"
            for b in server.client().list_blobs(out.split("/")[2], prefix="many/")
        ]
    else:
        names = list(get_store(out, cfg).list(out))
    assert len([n for n in names if n.endswith(".record")]) == 600, names[:5]
    assert out + "t.record.manifest.json" in names
