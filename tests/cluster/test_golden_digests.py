"""Output bytes of representative jobs, pinned: the demo, a shuffled job, the ops examples,
PCR and the in-memory ``load()``, each reduced to sha256 digests of what it writes (or
streams) and compared with ``tests/cluster/golden_digests.json``.

These digests were recorded before the code was reorganised into subpackages and the Beam
graph was made to do its own work on every runner; a refactor that changes any output byte
fails here.  Both drivers (the in-process default and ``--runner beam``, Beam's local
runner) must give them.

Regenerate (only for an intended change of output bytes, said so in the commit):
``TAR2TF_RECORD_GOLDEN=1 bash tests/run.sh tests/cluster/test_golden_digests.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
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


def _digests(out: str) -> dict:
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


def _manifest_digest(out: str, inp: str) -> str:
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


def _golden() -> dict:
    if not os.path.exists(GOLDEN):
        return {}
    with open(GOLDEN) as f:
        return json.load(f)


def _check(name: str, got: dict) -> None:
    if RECORD:
        gold = _golden()
        gold[name] = got
        with open(GOLDEN, "w") as f:
            json.dump(gold, f, indent=1, sort_keys=True)
            f.write("\n")
        return
    assert got, f"{name}: the job wrote nothing"
    assert got == _golden()[name], f"{name}: output bytes differ from the pinned digests"


def _tar2tf(args, out, extra=(), inp=""):
    args = [a.replace("OUT", out).replace("IN/", inp + "/") for a in args]
    cmd = [sys.executable, "-m", "launch.cli"] + args + list(extra)
    # Beam's local runner as a user gets it (its multi_processing mode), not the suite's
    env = dict(os.environ, **DEFAULT_MODE_ENV)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


# no runner flag: the in-process driver (pcr: the Beam graph on threads of the CLI)
RUNNERS = {"beam": ["--runner", "beam"], "local": []}


# --shuffle is a Beam graph only (docs/runners.md: with no runner flag it runs on Beam's
# local runner too); digests are recorded from Beam's local runner
CASES = [
    (job, runner)
    for job in sorted(JOBS)
    for runner in sorted(RUNNERS)
    if runner == "beam" or (job != "shuffle" and not RECORD)
]


@pytest.mark.parametrize("job,runner", CASES)
def test_job_bytes_are_pinned(job, runner, tmp_path):
    out, inp = tmp_path / "out", tmp_path / "in"
    out.mkdir()
    inp.mkdir()
    shutil.copy(DEMO.replace("{0..3}", "0"), inp / "again.tar")  # demo-0's keys again
    _tar2tf(JOBS[job], str(out), RUNNERS[runner], str(inp))
    got = _digests(str(out))
    if job == "planned-dup":
        got["manifest"] = _manifest_digest(str(out), str(inp))
    _check(job, got)


def _element_digest(ds) -> str:
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


def test_in_memory_load_is_pinned():
    from pipelines import Dataset
    from transforms.ops import Decode, Resize

    ds = Dataset(
        os.path.dirname(DEMO), None, [Decode("jpg"), Resize("jpg", (16, 16))], ["jpg", "cls"]
    )
    got = {
        "elements": _element_digest(
            ds.load(os.path.basename(DEMO), num_workers=2, remote_exec=False)
        )
    }
    _check("in-memory-load", got)
