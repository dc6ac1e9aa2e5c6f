"""The golden jobs (tests/cluster/test_golden_digests.py, test_golden_codec.py): what
they run, and their outputs reduced to sha256 digests, compared with (or, with
``TAR2TF_RECORD_GOLDEN=1``, recorded into) ``tests/cluster/golden_digests.json``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from conftest import DEFAULT_MODE_ENV

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..3}.tar")
GOLDEN = os.path.join(ROOT, "tests", "cluster", "golden_digests.json")
RECORD = os.environ.get("TAR2TF_RECORD_GOLDEN") == "1"
OPS_RESIZE = '{conversions: [Decode(jpg), "Resize(jpg, (32, 32))"], selections: [jpg, cls]}'
OPS_ENCODE = '{conversions: [Decode(jpg), "Resize(jpg, (48, 40))", "Encode(jpg, quality=90)"]}'

# name -> tar2tf arguments after the subcommand (OUT: the job's output directory)
JOBS = {
    "demo": [
        "convert",
        DEMO,
        "--output",
        "OUT/demo-{}.record",
        "--max-shard-size",
        "200KB",
        "--type-map",
        "cls:int64",
    ],
    "shuffle": [
        "convert",
        DEMO,
        "--output",
        "OUT/train.record",
        "--max-shard-size",
        "200KB",
        "--shuffle",
        "--seed",
        "7",
    ],
    "ops-resize": [
        "convert",
        DEMO,
        "--output",
        "OUT/r-{}.record",
        "--ops",
        OPS_RESIZE,
        "--records-per-shard",
        "30",
    ],
    "ops-encode": [
        "convert",
        DEMO,
        "--output",
        "OUT/e-{}.record",
        "--ops",
        OPS_ENCODE,
        "--type-map",
        "cls:int64",
    ],
    "pcr": ["pcr", DEMO, "--output", "OUT", "--images-per-record", "20", "--seed", "3"],
    # the planned path (shard names that need the count), both bounds, DALI indexes, and an
    # input shard whose keys an earlier one had (the manifest's duplicate report is pinned)
    "planned-dup": [
        "convert",
        DEMO,
        "IN/again.tar",
        "--output",
        "OUT/p.record",
        "--max-shard-size",
        "150KB",
        "--records-per-shard",
        "25",
        "--dali-index",
    ],
}
# what of a job's manifest is pinned besides its files' bytes (paths made relative)
MANIFEST_KEYS = ("totals", "duplicate_keys", "shards", "rejects")


def digests(out: str) -> dict:
    """sha256 of every file the job left in ``out`` except the manifest and rejects file,
    which name this run's temporary paths."""
    got = {}
    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name)
        if (
            os.path.isfile(p)
            and not name.endswith((".manifest.json", ".rejects.jsonl"))
            and name != "manifest.json"
            and name != "rejects.jsonl"
        ):
            with open(p, "rb") as f:
                got[name] = hashlib.sha256(f.read()).hexdigest()
    return got


def manifest_digest(out: str, inp: str) -> str:
    """sha256 of the manifest's counts, duplicate-key report, shard rows and reject
    summary, with this run's directories replaced by OUT and IN, the checkout's by ROOT."""
    names = [n for n in os.listdir(out) if n.endswith(".manifest.json")]
    if not names:
        return ""
    with open(os.path.join(out, names[0])) as f:
        m = json.load(f)
    text = json.dumps({k: m.get(k) for k in MANIFEST_KEYS}, sort_keys=True)
    text = text.replace(out, "OUT").replace(inp, "IN").replace(ROOT, "ROOT")
    return hashlib.sha256(text.encode()).hexdigest()


def pinned() -> dict:
    """The recorded digests, by job."""
    if not os.path.exists(GOLDEN):
        return {}
    with open(GOLDEN) as f:
        return json.load(f)


def check(name: str, got: dict) -> None:
    if RECORD:
        gold = pinned()
        gold[name] = got
        with open(GOLDEN, "w") as f:
            json.dump(gold, f, indent=1, sort_keys=True)
            f.write("\n")
        return
    assert got, f"{name}: the job wrote nothing"
    assert got == pinned()[name], f"{name}: output bytes differ from the pinned digests"


def tar2tf(args, out, extra=(), inp=""):
    args = [a.replace("OUT", out).replace("IN/", inp + "/") for a in args]
    cmd = [sys.executable, "-m", "launch.cli"] + args + list(extra)
    # Beam's local runner as a user gets it (its multi_processing mode), not the suite's
    env = dict(os.environ, **DEFAULT_MODE_ENV)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


# no runner flag: the in-process driver (pcr: the Beam graph on threads of the CLI)
RUNNERS = {"beam": ["--runner", "beam"], "local": []}


def element_digest(ds) -> str:
    """One sha256 over every element of a tf.data.Dataset, in order (values as numpy bytes,
    with their dtype and shape)."""
    h = hashlib.sha256()
    for el in ds.as_numpy_iterator():
        for v in el if isinstance(el, tuple) else (el,):
            if isinstance(v, dict):
                items = sorted(v.items())
            else:
                items = [("", v)]
            for k, x in items:
                h.update(f"{k}|{getattr(x, 'dtype', type(x))}|{getattr(x, 'shape', ())}|".encode())
                h.update(x.tobytes() if hasattr(x, "tobytes") else repr(x).encode())
    return h.hexdigest()
