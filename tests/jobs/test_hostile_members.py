"""Tar members named like a record's internal fields (``r1.__key__``, ``r1.__shard__``...):
a counted ``tar`` reject for their record, never a crash or a spoofed key (docs/bad-input.md).
"""

import io
import json
import os

import pytest
from support import shardgen
from support.cli_fixtures import cli

from transforms.record_types import INTERNAL_FIELDS, KEY, SHARD, is_reject
from transforms.tar.grouping import iter_records

# the tar of the report: a record with a member that would overwrite its key
MEMBERS = [
    ("a.txt", b"A"),
    ("a.cls", b"1"),
    ("r1.txt", b"R"),
    ("r1.__key__", b"SPOOFED"),
    ("r1.cls", b"2"),
    ("z.txt", b"Z"),
    ("z.cls", b"3"),
]
DRIVERS = {
    "local": ["--runner", "local"],
    # Beam's local runner under the name that selects it whatever the default driver is
    "beam": ["--runner=FnApiRunner"],
}


def _read(members):
    return list(iter_records(io.BytesIO(shardgen.tar_bytes(members)), "s.tar"))


@pytest.mark.parametrize(
    "ext",
    [*(f[2:-2] for f in INTERNAL_FIELDS), "KEY", "url", "local_path"],
    ids=lambda e: e,
)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_internal_field_name_rejects_its_record(ext, where):
    """Every internal field (and the rest of the __name__ namespace, in any case) as a
    member's extension, wherever it comes in its record: that record is one tar reject,
    the records around it are whole, and no record carries a field that is not a str."""
    name = f"r1.__{ext}__"
    r1 = [("r1.txt", b"R"), ("r1.cls", b"2")]
    r1.insert({"first": 0, "middle": 1, "last": 2}[where], (name, b"SPOOFED"))
    out = _read([("a.txt", b"A"), *r1, ("z.txt", b"Z")])
    assert [o[KEY] for o in out if not is_reject(o)] == ["a", "z"]
    assert all(
        o[SHARD] == "s.tar" and set(o) == {KEY, SHARD, "txt"} for o in out if not is_reject(o)
    )
    (rej,) = [o for o in out if is_reject(o)]
    assert (rej.key, rej.stage, rej.counts_record) == ("r1", "tar", True)
    assert rej.kind == "member named like an internal field"
    assert name in rej.reason


def test_shard_field_in_a_record_rejected_for_another_reason():
    """``r1.__shard__`` in a record that has another problem (a zero-length member) was a
    crash: the record is one reject with the first problem."""
    out = _read([("r1.txt", b""), ("r1.__shard__", b"x"), ("z.txt", b"Z")])
    assert [o[KEY] for o in out if not is_reject(o)] == ["z"]
    (rej,) = [o for o in out if is_reject(o)]
    assert rej.key == "r1" and rej.reason == "zero-length member: r1.txt"


def test_dunder_key_and_dotted_dunder_extension_are_data():
    """Only an extension that is a field name collides: a key named ``__key__`` or an
    extension that merely starts with one (``__key__.txt``) is an ordinary record."""
    out = _read([("__key__.txt", b"K"), ("b.__key__.txt", b"B")])
    assert out == [
        {KEY: "__key__", SHARD: "s.tar", "txt": b"K"},
        {KEY: "b", SHARD: "s.tar", "__key__.txt": b"B"},
    ]


def _keys(paths):
    from tensorflow.core.example import example_pb2

    from transforms.tfrecord.framing import iter_frames

    keys = []
    for p in paths:
        with open(p, "rb") as f:
            for _, payload in iter_frames(f):
                feats = example_pb2.Example.FromString(payload).features.feature
                keys.append(feats[KEY].bytes_list.value[0].decode())
    return keys


@pytest.mark.parametrize("driver", DRIVERS)
def test_cli_rejects_the_record_on_both_drivers(tmp_path, driver):
    """The tar of the report: exit 1 with a JSON TypeError and a shard keyed b'SPOOFED'
    before; now the good records are written, the record is counted, the exit code
    follows --max-rejects, and the output verifies."""
    src = tmp_path / "key.tar"
    src.write_bytes(shardgen.tar_bytes(MEMBERS))
    out = tmp_path / "o" / "t-{}.record"
    flags = [*DRIVERS[driver], "--no-progress"]
    p = cli("convert", str(src), "-o", str(out), *flags, timeout=300)
    assert p.returncode == 3, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "tar2tf convert: 1 rejects > --max-rejects 0"
    assert "Traceback" not in p.stderr and "TypeError" not in p.stderr
    manifest_path = tmp_path / "o" / "t.record.manifest.json"
    m = json.loads(manifest_path.read_text())
    assert m["totals"]["records_read"] == 3 and m["totals"]["records_written"] == 2
    shards = sorted(
        str(tmp_path / "o" / n) for n in os.listdir(tmp_path / "o") if n.endswith(".record")
    )
    assert _keys(shards) == ["a", "z"]
    rejects = [json.loads(x) for x in open(tmp_path / "o" / "t.record.rejects.jsonl")]
    assert [(r["key"], r["stage"], r["record"]) for r in rejects] == [("r1", "tar", True)]
    assert cli("verify", str(manifest_path)).returncode == 0
    if driver == "local":  # within --max-rejects: exit 0, same output
        p = cli("convert", str(src), "-o", str(out), *flags, "--max-rejects", "1", "--overwrite")
        assert p.returncode == 0, p.stderr
        assert _keys(shards) == ["a", "z"]


def test_key_too_long_is_one_reject_named_by_its_start():
    """A key beyond any file system's names (pax and GNU names reach 1 MiB, which gzip
    shrinks to almost nothing) is a reject that does not keep the key whole: the keys of a
    shard are held while it converts."""
    long_key = "d/" + "x" * 5000
    ok_key = "e/" + "y" * 4094  # exactly MAX_KEY_LENGTH characters
    out = _read(
        [
            ("a.txt", b"A"),
            (f"{long_key}.txt", b"L"),
            (f"{long_key}.cls", b"1"),
            (f"{ok_key}.txt", b"K"),
            ("z.txt", b"Z"),
        ]
    )
    assert [o[KEY] for o in out if not is_reject(o)] == ["a", ok_key, "z"]
    (rej,) = [o for o in out if is_reject(o)]
    assert rej.key == long_key[:200] + "..." and rej.counts_record and rej.stage == "tar"
    assert rej.reason.startswith("key too long: 5002 characters > 4096 (member d/xxx")
    assert len(rej.reason) < 300
