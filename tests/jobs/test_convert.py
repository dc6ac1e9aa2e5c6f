"""End-to-end TFRecord conversion on the local Beam runner."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from support import shardgen
from support.cli_fixtures import crc32c_file

from pipelines.beam.convert import convert
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.refused import OutputExistsError
from transforms.tfrecord.example import parse_example
from transforms.tfrecord.framing import read_records
from transforms.tfrecord.schema import tf_feature_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _conserved(t):
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("in")
    return shardgen.make_shards(str(d), 3, 8), str(d)


def test_readback_with_tf_and_manifest(shards, tmp_path):
    import tensorflow as tf

    paths, d = shards
    res = convert(
        ConvertConfig(
            sources=d + "/train-{0000..0002}.tar",
            output=str(tmp_path / "o/train-{}.record"),
            max_shard_size="30KB",
            type_map={"cls": "int64"},
        )
    )
    assert res.exit_code == 0 and res.paths
    m = res.manifest
    assert [s["path"] for s in m["shards"]] == [
        str(tmp_path / f"o/train-{i + 1}.record") for i in range(len(res.paths))
    ]
    for s in m["shards"]:
        assert s["bytes"] == os.path.getsize(s["path"]) <= 30_000 and s["records"] > 0
        assert s["crc32c"] == crc32c_file(s["path"]) and "sha256" not in s
        assert s["records"] == len(list(read_records(s["path"])))
    assert m["schema"]["cls"]["dtype"] == "int64" and m["schema"]["jpg"]["dtype"] == "bytes"
    _conserved(m["totals"])
    assert m["totals"]["records_written"] == 24 and m["rejects"]["count"] == 0
    # counters (what the summary is built from) agree with the manifest
    for k in ("records_read", "records_written", "records_rejected", "bytes_written"):
        assert res.counters.get(k, 0) == m["totals"][k]
    # read back with TensorFlow, compare with the input bytes, in source order
    spec = tf_feature_spec(m["schema"])
    members = {}
    for s in range(3):
        members.update(dict(shardgen.sample_members(s * 8, 8)))
    got = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(res.paths)]
    assert [g["__key__"].numpy().decode() for g in got] == [f"{i:06d}" for i in range(24)]
    for g in got:
        k = g["__key__"].numpy().decode()
        assert g["jpg"].numpy() == members[k + ".jpg"]
        assert int(g["cls"].numpy()) == int(members[k + ".cls"])
    assert not os.path.exists(tmp_path / "o/.tar2tf-work")


def test_naming_bounds_and_lone_big_record(tmp_path, caplog):
    d = tmp_path / "in"
    d.mkdir()
    big = os.urandom(50_000)
    shardgen.write_tar(
        str(d / "a.tar"), [("x1.bin", b"1" * 10), ("x2.bin", big), ("x3.bin", b"3" * 10)]
    )
    res = convert(
        ConvertConfig(
            sources=str(d / "a.tar"),
            output=str(tmp_path / "o/data.tfrecord"),
            max_shard_size=20_000,
        )
    )
    names = [os.path.basename(p) for p in res.paths]
    assert names == [f"data-{i:05d}-of-00003.tfrecord" for i in range(3)]
    assert [s["records"] for s in res.manifest["shards"]] == [1, 1, 1]
    assert res.manifest["shards"][1]["bytes"] > 20_000  # alone, with a warning
    assert any("exceeds max shard size" in r.message for r in caplog.records)
    res2 = convert(
        ConvertConfig(
            sources=str(d / "a.tar"), output=str(tmp_path / "p/d-{}.rec"), records_per_shard=2
        )
    )
    assert [s["records"] for s in res2.manifest["shards"]] == [2, 1]
    caplog.clear()  # a type map name no feature has is said, not silently ignored
    convert(
        ConvertConfig(
            sources=str(d / "a.tar"),
            output=str(tmp_path / "t/d-{}.rec"),
            type_map="bin:int64,nosuch:float",
        )
    )
    assert [r.message for r in caplog.records if "type map" in r.message] == [
        "type map names nosuch, which no written feature has (features: __key__, bin): they typed nothing"
    ]
    caplog.clear()  # a streamed ({} template) output warns as well
    res3 = convert(
        ConvertConfig(
            sources=str(d / "a.tar"), output=str(tmp_path / "q/d-{}.rec"), max_shard_size=20_000
        )
    )
    assert [s["records"] for s in res3.manifest["shards"]] == [1, 1, 1]
    assert [r.message for r in caplog.records if "exceeds max shard size" in r.message] == [
        f"record of {res3.manifest['shards'][1]['bytes']} bytes exceeds max shard size 20000: it sits alone in "
        f"{res3.paths[1]}"
    ]


@pytest.mark.slow
def test_overwrite_refused_then_stale_removed(shards, tmp_path):
    _, d = shards
    out = str(tmp_path / "o/t.record")
    cfg = dict(sources=d + "/train-*.tar", output=out, records_per_shard=4)
    first = convert(ConvertConfig(**cfg))
    assert len(first.paths) == 6
    with pytest.raises(OutputExistsError):
        convert(ConvertConfig(**cfg))
    second = convert(ConvertConfig(**dict(cfg, records_per_shard=12), overwrite=True))
    assert len(second.paths) == 2
    left = sorted(f for f in os.listdir(tmp_path / "o") if f.endswith(".record"))
    assert left == ["t-00000-of-00002.record", "t-00001-of-00002.record"]
    # a DALI index of an earlier run must not stay beside a rewritten shard of the same name
    out2 = str(tmp_path / "q/t-{}.record")
    with_idx = convert(
        ConvertConfig(sources=d + "/train-*.tar", output=out2, records_per_shard=4, dali_index=True)
    )
    assert all(os.path.exists(p + ".idx") for p in with_idx.paths)
    again = convert(
        ConvertConfig(sources=d + "/train-*.tar", output=out2, records_per_shard=5, overwrite=True)
    )
    assert again.paths and not [f for f in os.listdir(tmp_path / "q") if f.endswith(".idx")]


def test_resume_never_takes_over_another_jobs_output(shards, tmp_path):
    """``--resume`` continues an interrupted run of the same job only: finished shards of
    another job (other inputs or options) under the same names are refused, untouched; and
    two outputs never share a work directory (a journal lists its own output's shards)."""
    from pipelines.job.lifecycle import work_dir_for

    _, d = shards
    out = str(tmp_path / "o/t-{}.record")
    first = convert(ConvertConfig(sources=d + "/train-*.tar", output=out, records_per_shard=4))
    before = {p: _sha(p) for p in first.paths}
    with pytest.raises(OutputExistsError, match="no interrupted run of this job"):
        convert(
            ConvertConfig(
                sources=d + "/train-0000.tar", output=out, records_per_shard=4, resume=True
            )
        )
    assert {p: _sha(p) for p in first.paths} == before
    cfg = dict(sources=d + "/train-*.tar", records_per_shard=4, work_dir=str(tmp_path / "w"))
    assert work_dir_for(ConvertConfig(output=out, **cfg), ["a"]) != work_dir_for(
        ConvertConfig(output=str(tmp_path / "o/p-{}.record"), **cfg), ["a"]
    )


def test_compat_matches_go_tfdata_output(compat_dir, tmp_path):
    res = convert(
        ConvertConfig(
            sources=os.path.join(compat_dir, "ais-small-mnist-3.tar"),
            output=str(tmp_path / "m-{}.record"),
        )
    )
    ours = [parse_example(r) for r in read_records(res.paths[0])]
    theirs = [
        parse_example(r) for r in read_records(os.path.join(compat_dir, "ais-small-mnist-3.record"))
    ]
    # go-tfdata stores __key__ JSON-quoted ('"mnist-3/10000"'); everything else is equal
    for t in theirs:
        t["__key__"] = json.loads(t["__key__"])
    assert ours == theirs and len(ours) == 3


def test_bad_inputs_are_rejects_and_nothing_else_is_lost(tmp_path):
    t1, t2 = shardgen.bad_inputs(str(tmp_path / "in"))
    res = convert(
        ConvertConfig(
            sources=[t1, t2],
            output=str(tmp_path / "o/x-{}.record"),
            max_member_size=4000,
            type_map={"cls": "int64"},
        )
    )
    tot = res.totals
    _conserved(tot)
    assert res.exit_code == 3
    assert (
        tot["members_duplicate"] >= 1
    )  # the repeated d.cls member: a duplicate, not a skipped one
    assert res.counters["members_duplicate"] == tot["members_duplicate"]
    assert res.counters.get("members_skipped", 0) == tot["members_skipped"]
    rejects = [json.loads(line) for line in open(res.rejects_path)]
    assert len(rejects) == res.manifest["rejects"]["count"]
    reasons = " | ".join(r["reason"] for r in rejects)
    for needle in (
        "missing shard",
        "not a tar archive",
        "truncated",
        "zero-length member",
        "member too large",
        "duplicate key",
        "value does not fit type",
    ):
        assert needle in reasons, needle
    assert {r["stage"] for r in rejects} >= {"list", "tar", "encode"}
    written = [parse_example(r)["__key__"] for p in res.paths for r in read_records(p)]
    # all of s-0, the intact records of s-2 and s-3, and 'a' and 'd' of s-4
    assert written[:5] == [f"{i:06d}" for i in range(5)]
    assert {"a", "d"} <= set(written) and "000010" in written
    assert len(written) == tot["records_written"] == len(set(written))
    # with a rejects budget the same job succeeds
    ok = convert(
        ConvertConfig(
            sources=[t1, t2],
            output=str(tmp_path / "o2/x-{}.record"),
            max_member_size=4000,
            type_map={"cls": "int64"},
            max_rejects=100,
        )
    )
    assert ok.exit_code == 0 and ok.totals == dict(tot, bytes_written=ok.totals["bytes_written"])


def _cli(*args, cwd=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-m", "launch.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=env,
    )


@pytest.mark.slow
def test_determinism_across_processes_and_worker_counts(shards, tmp_path):
    _, d = shards
    runs = []
    for i, extra in enumerate(
        [
            ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
            ["--direct_running_mode=multi_threading", "--direct_num_workers=3"],
            ["--processes", "2"],
        ]
    ):
        out = str(tmp_path / f"r{i}/t-{{}}.record")
        p = _cli(
            "convert",
            d + "/train-{0000..0002}.tar",
            "--output",
            out,
            "--max-shard-size",
            "25KB",
            "--type-map",
            "cls:int64",
            "--no-progress",
            *extra,
        )
        assert p.returncode == 0, p.stderr
        files = sorted(os.listdir(tmp_path / f"r{i}"))
        runs.append({f: _sha(tmp_path / f"r{i}" / f) for f in files if f.endswith(".record")})
        m = open(tmp_path / f"r{i}" / "t.record.manifest.json").read()
        runs[-1]["manifest"] = hashlib.sha256(m.replace(f"/r{i}/", "/rX/").encode()).hexdigest()
        assert "records: 24 read, 24 written, 0 rejected" in p.stderr
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) >= 3


def test_cli_exit_codes(shards, tmp_path):
    _, d = shards
    out = str(tmp_path / "t-{}.record")
    assert (
        _cli(
            "convert", d + "/train-0000.tar", "--output", out, "--max-shard-size", "lots"
        ).returncode
        == 2
    )
    assert _cli("convert", d + "/train-0000.tar", "--output", out).returncode == 0
    assert _cli("convert", d + "/train-0000.tar", "--output", out).returncode == 4
    p = _cli("convert", d + "/train-0000.tar", d + "/nope.tar", "--output", out, "--overwrite")
    assert p.returncode == 3 and "missing shard" in p.stderr


def test_job_failures_map_to_exit_codes(capsys):
    from launch.job_exit import exit_code
    from pipelines.inprocess.pool import WorkerDied

    for exc, code in (
        (OutputExistsError("exists"), 4),
        (ValueError("bad size"), 2),
        (ImportError("no module x"), 2),
        (WorkerDied("worker died with exit code -11"), 1),
    ):
        assert exit_code("convert", exc) == code
        assert capsys.readouterr().err.strip() == f"tar2tf convert: {exc}"


def test_the_beam_graph_and_the_in_process_driver_write_the_same_shards(
    shards, tmp_path, monkeypatch
):
    """The in-process driver fills final shards from a stream while pieces convert; the Beam
    graph plans them once every piece is done: the very same files and manifest rows."""
    from pipelines.inprocess import stream as shard_stream
    from pipelines.inprocess.driver import convert_in_process

    _, d = shards
    added = []
    real_add = shard_stream.ShardStream.add
    monkeypatch.setattr(
        shard_stream.ShardStream,
        "add",
        lambda self, p, place=None: (added.append(p.summary.index), real_add(self, p, place)),
    )

    def cfg(name):
        return ConvertConfig(
            sources=d + "/train-{0000..0002}.tar",
            output=str(tmp_path / name / "t-{}.record"),
            max_shard_size="20KB",
            type_map={"cls": "int64"},
            dali_index=True,
            progress=False,
        )

    streamed = convert_in_process(cfg("s"), num_workers=1)
    assert sorted(added) == [0, 1, 2]
    planned = convert(cfg("p"))
    assert len(added) == 3  # the Beam graph fed no stream
    files = lambda r, n: {
        os.path.basename(p): open(p, "rb").read() for p in r.paths + [p + ".idx" for p in r.paths]
    }
    assert len(streamed.paths) > 2 and files(streamed, "s") == files(planned, "p")
    rows = lambda r: [dict(s, path=os.path.basename(s["path"])) for s in r.manifest["shards"]]
    assert rows(streamed) == rows(planned)
