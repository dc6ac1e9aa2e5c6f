"""``output_lock.check_held(lock_url, token, config)``: the re-read of a job's output lock
before its commit point (pipelines/job/output_lock.py).  Plain values in, the documented
exit-4 refusal out when the lock no longer holds the token."""

from __future__ import annotations

import json
import os

import pytest

from pipelines.job import output_lock
from pipelines.job.output_lock import OutputLockedError


def _write(path, content) -> None:
    with open(path, "w") as f:
        f.write(content)


def test_a_lock_that_holds_the_token_passes(tmp_path):
    url = str(tmp_path / "t.record.tar2tf-lock")
    _write(url, json.dumps({"kind": output_lock.KIND, "token": "ours"}))
    output_lock.check_held(url, "ours")
    output_lock.check_held(url, None)  # an unlocked output: nothing to check
    output_lock.check_held(str(tmp_path / "absent"), None)


@pytest.mark.parametrize(
    "content, said",
    [
        (None, "the lock is gone"),
        ("", "not a tar2tf lock now"),
        ("{}", "not a tar2tf lock now"),
        ("[1, 2]", "not a tar2tf lock now"),
        (
            json.dumps({"kind": output_lock.KIND, "token": "theirs", "pid": 7, "host": "h2"}),
            "tar2tf job pid 7 on host h2, started ?",
        ),
    ],
    ids=["gone", "empty", "no-lock", "list", "taken"],
)
def test_a_lock_that_does_not_hold_the_token_is_the_exit_4_refusal(tmp_path, content, said):
    url = str(tmp_path / "t.record.tar2tf-lock")
    if content is not None:
        _write(url, content)
    with pytest.raises(OutputLockedError) as e:
        output_lock.check_held(url, "ours")
    assert str(e.value).startswith("another job took the lock on this output while this job ran")
    assert said in str(e.value)
    assert os.path.exists(url) == (content is not None)  # read only, never touched
