"""A shard worker process that fails (dies, exits, raises, never starts, or cannot be
given the job's ops): the in-process job fails with what happened, nobody waits for ever,
and no output or work directory is left (pipelines.inprocess.pool)."""

import os

import pytest
from support.scripts import run_script_file

from pipelines.inprocess.driver import convert_in_process
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import Func


def _job(sources, out, op):
    """A job of two worker processes that run ``op`` on every record."""
    return ConvertConfig(
        sources=sources,
        output=str(out / "t-{}.record"),
        sample_stages=(Func(op),),
        progress=False,
        processes=2,
    )


def _die(record):
    os._exit(3)  # a native crash in a worker, as far as the pool can tell


@pytest.mark.slow
def test_a_dead_worker_fails_the_job_and_leaves_no_output(pool_shards, tmp_path):
    out = tmp_path / "o"
    cfg = _job(pool_shards, out, _die)
    with pytest.raises(Exception, match="shard worker process .* died with exit code 3"):
        convert_in_process(cfg, num_workers=2)
    assert not [f for f in os.listdir(out) if f.endswith(".record")] if out.exists() else True


def _exit(record):
    raise SystemExit(4)  # not an Exception: ends the worker's main thread


@pytest.mark.slow
def test_a_worker_whose_op_ends_the_process_exits_with_its_code(pool_shards, tmp_path):
    """SystemExit in an op ends the worker with that exit code, though its reader thread
    is still blocked reading its input (shutdown must not wait for that reader and abort)."""
    cfg = _job(pool_shards, tmp_path / "o", _exit)
    with pytest.raises(Exception, match="shard worker process .* died with exit code 4"):
        convert_in_process(cfg, num_workers=2)


def test_one_crash_fails_the_job_without_leaving_anyone_waiting(pool_shards, tmp_path):
    """Two threads, one worker that crashes on a late shard: the thread waiting for
    the worker gets the error too instead of waiting forever (run in a subprocess with a
    timeout, so a hang fails the test instead of the suite)."""
    p = run_script_file(
        tmp_path,
        "import os\n"
        "from pipelines.job.kinds.tfrecord.config import ConvertConfig\n"
        "from pipelines.inprocess.driver import convert_in_process\n"
        "from transforms.ops import Func\n"
        "def crash_on_20(r):\n"
        "    if r['__key__'] == '000020':\n"
        "        os._exit(9)\n"
        "    return r\n"
        "try:\n"
        f"    convert_in_process(ConvertConfig(sources={pool_shards!r},\n"
        f"                       output={str(tmp_path / 'o' / 't-{{}}.record')!r},\n"
        "                       sample_stages=(Func(crash_on_20),), progress=False, processes=1),\n"
        "                       num_workers=2)  # two threads share the one worker\n"
        "except Exception as e:\n"
        "    print('FAILED:', type(e).__name__, str(e)[-400:])\n",
        timeout=240,
    )
    assert "FAILED:" in p.stdout and "died with exit code 9" in p.stdout, (
        p.stdout,
        p.stderr[-2000:],
    )
    assert not (tmp_path / "o").exists() or not [
        f for f in os.listdir(tmp_path / "o") if f.endswith(".record")
    ]


def test_an_error_in_a_worker_is_raised_with_its_traceback(pool_shards, tmp_path):
    from pipelines.job import lifecycle
    from transforms.tar.sources import resolve

    # a planned output: the worker writes its piece into the work dir (a streamed local
    # output's workers hold their pieces and write into the final pool_shards); a directory
    # stands where the first piece's sidecar goes (the job itself writes job.json there
    # first; the piece's own name is its attempt's, unknown in advance)
    cfg = ConvertConfig(
        sources=pool_shards, output=str(tmp_path / "t.record"), progress=False, processes=1
    )
    work = lifecycle.work_dir_for(cfg, resolve(cfg.sources, cfg.base, cfg.store)[0])
    os.makedirs(os.path.join(work, "piece-000000.json", "blocker"))
    with pytest.raises(
        Exception, match="(?s)failed in a shard worker process.*(IsADirectoryError|OSError)"
    ):
        convert_in_process(cfg, num_workers=2)


def test_a_worker_that_cannot_start_is_reported(pool_shards, tmp_path, monkeypatch):
    from pipelines.inprocess import handle as worker_handle

    monkeypatch.setattr(
        worker_handle, "_BOOT", "import sys; sys.exit(7)"
    )  # e.g. a broken environment
    cfg = ConvertConfig(
        sources=pool_shards, output=str(tmp_path / "t-{}.record"), progress=False, processes=2
    )
    with pytest.raises(Exception, match="died with exit code 7"):
        convert_in_process(cfg, num_workers=2)


def test_a_job_whose_ops_cannot_travel_to_its_workers_leaves_no_work_directory(
    pool_shards, tmp_path
):
    """processes=2 with an op that cannot be pickled: the job stops before it writes
    anything, job.json included (a record there would be taken for an interrupted run by a
    later --resume with other options)."""
    import threading

    lock = threading.Lock()

    def locked(record):
        with lock:
            return record

    cfg = _job(pool_shards, tmp_path / "o", locked)
    with pytest.raises(Exception, match="(?i)pickle"):
        convert_in_process(cfg, num_workers=2)
    assert (
        not (tmp_path / "o" / ".tar2tf-work").exists()
        or os.listdir(tmp_path / "o" / ".tar2tf-work") == []
    )
