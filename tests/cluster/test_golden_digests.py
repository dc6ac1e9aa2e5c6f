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

import os
import shutil

import pytest
from support.golden import (
    DEMO,
    JOBS,
    RECORD,
    RUNNERS,
    check,
    digests,
    element_digest,
    manifest_digest,
    tar2tf,
)

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
    tar2tf(JOBS[job], str(out), RUNNERS[runner], str(inp))
    got = digests(str(out))
    if job == "planned-dup":
        got["manifest"] = manifest_digest(str(out), str(inp))
    check(job, got)


def test_in_memory_load_is_pinned():
    from pipelines import Dataset
    from transforms.ops import Decode, Resize

    ds = Dataset(
        os.path.dirname(DEMO), None, [Decode("jpg"), Resize("jpg", (16, 16))], ["jpg", "cls"]
    )
    got = {
        "elements": element_digest(
            ds.load(os.path.basename(DEMO), num_workers=2, remote_exec=False)
        )
    }
    check("in-memory-load", got)
