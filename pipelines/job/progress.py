"""Live progress of a job: shards done/total, records, MB/s, ETA (tqdm, on stderr).

The bar counts what the job has finished, not what its workers say: :func:`watch` reads
the sidecars that each finished input shard leaves in the job's work directory
(``pipelines.job.workfiles``).  So it works the same whichever process converted the shard
(a Beam worker process, a Flink TaskManager's SDK worker on this machine, a thread), and no
DoFn needs to know that a bar exists.  A work directory in a bucket gets no bar (listing it
every second would cost requests); the report at the end comes from Beam's counters there.
The in-process driver calls :meth:`Progress.shard_done` itself.  The bar is quiet when
stderr is not a terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from typing import Iterator, Optional, Set

from pipelines.job import workfiles
from transforms.stores import StoreConfig, split_url

POLL_SECONDS = 0.5


class Progress:
    def __init__(self, total_shards: int, enabled: Optional[bool] = None):
        from tqdm import tqdm

        enabled = sys.stderr.isatty() if enabled is None else enabled
        # a terminal that reports 0 columns (some ptys, CI consoles) would get an empty bar
        sized = enabled and _columns() > 0
        self._bar = tqdm(
            total=total_shards,
            unit="shard",
            disable=not enabled,
            dynamic_ncols=sized,
            ncols=None if sized else 100,
            nrows=None if sized else 24,
            desc="tar2tf",
        )
        self.enabled = enabled
        self._records = 0
        self._bytes = 0
        self._lock = threading.Lock()

    def shard_done(self, records: int, nbytes: int) -> None:
        with self._lock:
            self._records += records
            self._bytes += nbytes
            elapsed = max(self._bar.format_dict.get("elapsed", 0.0), 1e-6)
            self._bar.set_postfix(
                records=self._records, MBps=f"{self._bytes / 1e6 / elapsed:.1f}", refresh=False
            )
            self._bar.update(1)

    def complete(self, records: int, nbytes: int) -> None:
        """The job finished: every shard done, with these totals (the sidecars of the last
        shards may be gone before a poll saw them)."""
        with self._lock:
            self._records, self._bytes = records, nbytes
            elapsed = max(self._bar.format_dict.get("elapsed", 0.0), 1e-6)
            self._bar.set_postfix(
                records=records, MBps=f"{nbytes / 1e6 / elapsed:.1f}", refresh=False
            )
            self._bar.update(self._bar.total - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def _sidecar_counts(path: str):
    """(records, bytes) of a finished shard's sidecar: a TFRecord piece's or a PCR unit's."""
    try:
        with open(path, "rb") as f:
            info = json.loads(f.read())
    except (OSError, ValueError):
        return None  # being written (sidecars are renamed into place) or not a sidecar
    if not isinstance(info, dict):
        return None
    if "records" in info and "member_bytes" in info:  # a TFRecord piece
        return int(info["records"]), int(info["member_bytes"])
    if "images" in info:  # a PCR unit
        return len(info["images"]), int(sum(info.get("sizes", [])))
    return None


@contextlib.contextmanager
def watch(
    work: str,
    store: StoreConfig,
    total_shards: int,
    enabled: Optional[bool] = None,
    pattern: str = ".json",
) -> Iterator[Optional[Progress]]:
    """A bar for the block, fed by the sidecars that appear in the local work directory
    ``work`` (one per finished input shard, ``pattern`` their name's end)."""
    enabled = sys.stderr.isatty() if enabled is None else enabled
    if not enabled or split_url(work)[0] != "":
        yield None
        return
    bar = Progress(total_shards, True)
    stop = threading.Event()
    seen: Set[str] = set()

    def poll() -> None:
        while True:
            try:
                names = [
                    n
                    for n in os.listdir(work)
                    # a unit's sidecar, not an attempt's own description (workfiles)
                    if n.endswith(pattern)
                    and n != "job.json"
                    and workfiles.ATTEMPT not in n
                    and n not in seen
                ]
            except OSError:
                names = []
            for name in sorted(names):
                counts = _sidecar_counts(os.path.join(work, name))
                if counts is not None:
                    seen.add(name)
                    bar.shard_done(*counts)
            if stop.wait(POLL_SECONDS):
                return

    t = threading.Thread(target=poll, daemon=True, name="tar2tf-progress")
    t.start()
    try:
        yield bar
    finally:
        stop.set()
        t.join()
        bar.close()
