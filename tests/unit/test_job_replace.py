"""Replacing an earlier output (``pipelines.job.replace``), step by step on a local output
directory, as the kinds call it: ``begin`` before the first final file, ``remove_stale``
once all are written, the new manifest, then ``end``.  What each step leaves on disk, what
a job killed between two steps leaves, and what the next job does with it: the earlier
outputs the ledger names are deleted once the new output is written, files nobody named
stay, and an input is never deleted."""

import json
import logging
import os

from pipelines.inprocess import journal
from pipelines.job import job_file, names, replace
from pipelines.job import manifest as job_manifest
from pipelines.job.kinds.pcr.records import manifest_path as pcr_manifest_path
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.lifecycle import job_of, work_dir_for
from transforms.pcr import format as pcr_format


def _touch(path, data=b"x") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _commit(output, shards):
    """A finished run's output: its shards, then its manifest naming them."""
    rows = [{"path": _touch(p, p.encode())} for p in shards]
    manifest = {"kind": "tfrecord", "output": output, "shards": rows}
    job_manifest.write_manifest(output, manifest, [])
    return names.companion(output, ".manifest.json")


def _files(d):
    return sorted(os.listdir(d))


def _ledger(mpath):
    with open(replace.ledger_of(mpath)) as f:
        return set(json.load(f)["outputs"])


def _finish(output, written, inputs=()):
    """A run's end as the TFRecord kind makes it: stale files removed, the new manifest
    written (the commit point), the ledger deleted."""
    mpath = names.companion(output, ".manifest.json")
    existing = names.existing_outputs(output)
    deleted = replace.remove_stale(existing, set(written), mpath, list(inputs))
    job_manifest.write_manifest(
        output, {"kind": "tfrecord", "output": output, "shards": [{"path": p} for p in written]}, []
    )
    replace.end(mpath)
    return deleted


def test_the_ledger_sits_beside_the_manifest():
    assert replace.ledger_of("out/t.record.manifest.json") == "out/t.record.replacing.json"
    mpath = names.companion("out/t-{}.record", ".manifest.json")
    assert replace.ledger_of(mpath) == "out/t.record.replacing.json"
    assert replace.ledger_of(pcr_manifest_path("out/ds")) == "out/ds/PCR.replacing.json"


def test_begin_saves_the_earlier_outputs_then_deletes_the_manifest(tmp_path):
    output = str(tmp_path / "t.record")
    old = names.shard_names(output, 3)
    mpath = _commit(output, old)

    replace.begin(mpath)

    assert not os.path.exists(mpath)  # no manifest: no reader takes old and new together
    assert _ledger(mpath) == set(old) == replace.previous_outputs(mpath)
    assert all(os.path.exists(p) for p in old)  # nothing deleted yet


def test_begin_on_a_new_output_writes_nothing(tmp_path):
    mpath = names.companion(str(tmp_path / "t.record"), ".manifest.json")
    replace.begin(mpath)
    assert _files(tmp_path) == []
    assert replace.previous_outputs(mpath) == set()


def test_a_job_killed_mid_replacement_is_finished_by_the_next_run(tmp_path):
    output = str(tmp_path / "t.record")
    old = names.shard_names(output, 3)
    mpath = _commit(output, old)
    new = names.shard_names(output, 2)

    # a replacing run: begin, two new shards written, then killed
    replace.begin(mpath)
    for p in new:
        _touch(p, b"new")
    # it leaves no manifest, the ledger of the earlier outputs, old and new shards
    assert not os.path.exists(mpath)
    assert _ledger(mpath) == set(old)
    assert set(names.existing_outputs(output)) == set(old) | set(new)

    # the next run (--overwrite, or --resume of the same job) finishes the replacement
    replace.begin(mpath)
    assert _ledger(mpath) == set(old)  # kept while no manifest names anything
    for p in new:
        _touch(p, b"new")
    deleted = _finish(output, new)

    assert sorted(deleted) == sorted(old)
    assert sorted(names.existing_outputs(output)) == sorted(new)
    assert _files(tmp_path) == sorted(
        [os.path.basename(p) for p in new] + ["t.record.manifest.json", "t.record.rejects.jsonl"]
    )


def test_a_ledger_left_after_the_commit_point_is_merged_not_lost(tmp_path):
    """Killed between the new manifest and ``end``: the next replacement's ledger holds
    the old ledger's names and the new manifest's."""
    output = str(tmp_path / "t.record")
    first = names.shard_names(output, 3)
    mpath = _commit(output, first)
    replace.begin(mpath)
    second = names.shard_names(output, 2)
    for p in second:
        _touch(p)
    replace.remove_stale(names.existing_outputs(output), set(second), mpath, [])
    job_manifest.write_manifest(
        output, {"kind": "tfrecord", "output": output, "shards": [{"path": p} for p in second]}, []
    )
    # killed here, before replace.end
    assert os.path.exists(mpath) and _ledger(mpath) == set(first)

    replace.begin(mpath)

    assert not os.path.exists(mpath)
    assert _ledger(mpath) == set(first) | set(second)


def test_stale_removal_deletes_only_what_the_ledger_names(tmp_path, caplog):
    output = str(tmp_path / "t-{}.record")
    old = [names.fill(output, n) for n in (1, 2, 3)]
    mpath = _commit(output, old)
    for p in old:
        _touch(p + ".idx")  # their DALI indexes
    stray = _touch(names.fill(output, 9))  # named like a shard, but no manifest named it
    replace.begin(mpath)
    keep = {names.fill(output, 1)}  # the new run wrote t-1 only
    _touch(names.fill(output, 1), b"new")

    with caplog.at_level(logging.WARNING, logger="tar2tf"):
        deleted = replace.remove_stale(
            names.existing_outputs(output), keep, mpath, [], extra=lambda u: [u + ".idx"]
        )

    assert sorted(deleted) == old[1:]
    assert _files(tmp_path) == sorted(
        [
            "t-1.record",
            "t-1.record.idx",
            "t-9.record",
            "t.record.rejects.jsonl",  # the earlier run's: written again with the manifest
            "t.record.replacing.json",
        ]
    )
    assert os.path.exists(stray)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "1 file(s)" in warned[0] and stray in warned[0]


def test_stale_removal_never_deletes_an_input(tmp_path, monkeypatch, caplog):
    """The ledger names an earlier output that is now an input of the job (spelt as a
    relative path): it stays."""
    monkeypatch.chdir(tmp_path)
    output = str(tmp_path / "t.record")
    old = names.shard_names(output, 2)
    mpath = _commit(output, old)
    replace.begin(mpath)
    inputs = [os.path.relpath(old[1], tmp_path)]

    with caplog.at_level(logging.WARNING, logger="tar2tf"):
        deleted = replace.remove_stale(names.existing_outputs(output), set(), mpath, inputs)

    assert deleted == [old[0]]
    assert not os.path.exists(old[0]) and os.path.exists(old[1])
    assert any(old[1] in r.getMessage() for r in caplog.records)


def test_end_deletes_the_ledger_and_is_harmless_without_one(tmp_path):
    output = str(tmp_path / "t.record")
    mpath = _commit(output, names.shard_names(output, 1))
    replace.begin(mpath)
    assert os.path.exists(replace.ledger_of(mpath))
    replace.end(mpath)
    assert not os.path.exists(replace.ledger_of(mpath))
    replace.end(mpath)
    assert replace.previous_outputs(mpath) == set()


def test_an_unreadable_manifest_is_deleted_and_an_unreadable_ledger_replaced(tmp_path):
    output = str(tmp_path / "t.record")
    mpath = _touch(names.companion(output, ".manifest.json"), b"{not json")
    replace.begin(mpath)
    assert _files(tmp_path) == []  # it named nothing: no ledger either

    old = names.shard_names(output, 2)
    mpath = _commit(output, old)
    _touch(replace.ledger_of(mpath), b"\x00garbage")
    assert replace.previous_outputs(mpath) == set()
    replace.begin(mpath)
    assert _ledger(mpath) == set(old)


def test_files_of_a_moved_output_are_found_beside_its_manifest(tmp_path):
    """The earlier manifest was written elsewhere (the output was moved, or spelt another
    way): a shard it names beside itself is now beside it; one named in another directory
    stays at its recorded path."""
    out = tmp_path / "out"
    output = str(out / "t.record")
    mpath = names.companion(output, ".manifest.json")
    beside = names.shard_names("/elsewhere/t.record", 2)
    apart = "/other/place/t-00000-of-00001.record"
    rows = [{"path": p} for p in beside + [apart]]
    _touch(mpath, json.dumps({"output": "/elsewhere/t.record", "shards": rows}).encode())

    replace.begin(mpath)

    assert _ledger(mpath) == {str(out / os.path.basename(p)) for p in beside} | {apart}


def test_a_pcr_replacement_deletes_the_index_too_and_finds_its_records(tmp_path):
    ds = tmp_path / "ds"
    mpath = pcr_manifest_path(str(ds))
    index = _touch(str(ds / pcr_format.INDEX_NAME))
    records = [_touch(str(ds / pcr_format.record_name(i))) for i in range(2)]
    recorded = ["/moved/ds/" + os.path.basename(p) for p in records]  # written there
    manifest = {"kind": "pcr", "output": "/moved/ds", "shards": [{"path": p} for p in recorded]}
    _touch(mpath, json.dumps(manifest).encode())

    replace.begin(mpath, also_delete=[index])

    assert not os.path.exists(mpath) and not os.path.exists(index)
    assert _ledger(mpath) == set(records)
    assert all(os.path.exists(p) for p in records)


def test_shards_journaled_by_interrupted_runs_of_this_output_are_replaced(tmp_path):
    """Streamed runs journal final shards that no manifest names yet.  A run of this
    output with other options, interrupted, left three; a run of another output in the
    same directory left one.  The next job of this output (nothing to resume: its own work
    directory is new) writes two shards: the first run's third is deleted, the other
    output's shard is not."""
    inputs = [str(tmp_path / "in.tar")]
    output = str(tmp_path / "t-{}.record")
    other = str(tmp_path / "u-{}.record")

    def interrupted(cfg, n_shards):
        work = work_dir_for(cfg, inputs)
        job_file.write(work, job_of(cfg, inputs))
        for n in range(1, n_shards + 1):
            path = _touch(names.fill(cfg.output, n))
            row = {"path": path, "records": 1, "bytes": 1, "crc32c": "0"}
            journal.write(work, n, row, [], [n, 0])

    interrupted(ConvertConfig(sources=inputs, output=output, records_per_shard=5), 3)
    interrupted(ConvertConfig(sources=inputs, output=other), 1)
    cfg = ConvertConfig(sources=inputs, output=output, overwrite=True)
    work = work_dir_for(cfg, inputs)
    mpath = names.companion(output, ".manifest.json")

    replace.begin(mpath, output=output, work=work)

    assert _ledger(mpath) == {names.fill(output, n) for n in (1, 2, 3)}
    written = [names.fill(output, n) for n in (1, 2)]
    assert sorted(_finish(output, written, inputs)) == [names.fill(output, 3)]
    assert sorted(names.existing_outputs(output)) == written
    assert os.path.exists(names.fill(other, 1))
