"""Live progress of a job: shards done/total, records, MB/s, ETA, on stderr.

On a terminal it is a bar (tqdm).  Elsewhere (a log file, a pipe, a notebook) a bar would
be a stream of carriage returns, or nothing, and a long job would be silent until its
summary: there it is a line every ``every`` seconds (:data:`DEFAULT_EVERY`), so a job
shorter than that prints none::

    tar2tf: progress: 12/40 shards, 3456 records, 57.6 records/s, 8.2 MB/s, 1m00s, ETA 2m20s

``enabled`` (``progress=`` of the configs, ``--progress/--no-progress``): None or True
shows it (the bar or the lines), False nothing.

The counts are what the job has finished, not what its workers say: :func:`watch` reads
the sidecars that each finished input shard leaves in the job's work directory
(``pipelines.job.workfiles``).  So it works the same whichever process converted the shard
(a Beam worker process, a Flink TaskManager's SDK worker on this machine, a thread), and no
DoFn needs to know that progress is shown.  A work directory in a bucket gets none (listing
it every second would cost requests); the report at the end comes from Beam's counters
there.  The in-process driver calls :meth:`Progress.shard_done` itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import Iterator, Optional, Set, TextIO

from pipelines.job import workfiles
from transforms.stores import StoreConfig, split_url

POLL_SECONDS = 0.5
DEFAULT_EVERY = 60.0  # seconds between progress lines where stderr is not a terminal


class Progress:
    """The bar or the lines of one job (see the module docstring).  ``out``: where they go
    (default: ``sys.stderr`` now); a bar if it is a terminal, else lines."""

    def __init__(
        self,
        total_shards: int,
        enabled: Optional[bool] = None,
        every: Optional[float] = None,
        out: Optional[TextIO] = None,
    ):
        self._out = out if out is not None else sys.stderr
        self.mode = None if enabled is False else ("bar" if _isatty(self._out) else "lines")
        self.enabled = self.mode is not None
        self.total = total_shards
        self._done = self._records = self._bytes = 0
        # what a resumed job had before this run: counted, but not in this run's rate
        self._base_done = self._base_records = self._base_bytes = 0
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = None
        self._ticker: Optional[threading.Thread] = None
        if self.mode == "bar":
            from tqdm import tqdm

            # a terminal that reports 0 columns (some ptys, CI consoles) would get an empty bar
            sized = _columns(self._out) > 0
            self._bar = tqdm(
                total=total_shards,
                unit="shard",
                dynamic_ncols=sized,
                ncols=None if sized else 100,
                nrows=None if sized else 24,
                desc="tar2tf",
                file=self._out,
            )
        elif self.mode == "lines":
            self._every = checked_every(every)
            self._ticker = threading.Thread(
                target=self._tick, daemon=True, name="tar2tf-progress-lines"
            )
            self._ticker.start()

    def shard_done(self, records: int, nbytes: int, resumed: bool = False) -> None:
        """One input shard finished (``resumed``: an interrupted run had finished it)."""
        with self._lock:
            self._done += 1
            self._records += records
            self._bytes += nbytes
            if resumed:
                self._base_done += 1
                self._base_records += records
                self._base_bytes += nbytes
            if self._bar is not None:
                elapsed = max(self._bar.format_dict.get("elapsed", 0.0), 1e-6)
                self._bar.set_postfix(
                    records=self._records,
                    MBps=f"{self._bytes / 1e6 / elapsed:.1f}",
                    refresh=False,
                )
                self._bar.update(1)

    def complete(self, records: int, nbytes: int) -> None:
        """The job finished: every shard done, with these totals (the sidecars of the last
        shards may be gone before a poll saw them)."""
        with self._lock:
            self._done, self._records, self._bytes = self.total, records, nbytes
            if self._bar is not None:
                elapsed = max(self._bar.format_dict.get("elapsed", 0.0), 1e-6)
                self._bar.set_postfix(
                    records=records, MBps=f"{nbytes / 1e6 / elapsed:.1f}", refresh=False
                )
                self._bar.update(self._bar.total - self._bar.n)

    def line(self) -> str:
        """The progress line as it stands (what the lines mode prints)."""
        with self._lock:
            elapsed = max(time.monotonic() - self._t0, 1e-6)
            done = self._done - self._base_done  # this run's
            records = self._records - self._base_records
            mb = (self._bytes - self._base_bytes) / 1e6
            left = self.total - self._done
            if left <= 0:
                eta = "converted, writing"
            elif done > 0:
                eta = f"ETA {_duration(elapsed * left / done)}"
            else:
                eta = "ETA unknown"
            return (
                f"tar2tf: progress: {self._done}/{self.total} shards, {self._records} records, "
                f"{records / elapsed:.1f} records/s, {mb / elapsed:.1f} MB/s, "
                f"{_duration(elapsed)}, {eta}"
            )

    def _tick(self) -> None:
        while not self._stop.wait(self._every):
            text = self.line()
            try:
                print(text, file=self._out, flush=True)
            except (OSError, ValueError):  # a closed log: progress is not worth failing for
                return

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self._bar is not None:
            self._bar.close()


def checked_every(every: Optional[float]) -> float:
    """The seconds between progress lines (:data:`DEFAULT_EVERY` for None); ValueError
    unless a positive, finite number (a job's options are checked before it starts)."""
    if every is None:
        return DEFAULT_EVERY
    try:
        x = float(every)
    except (TypeError, ValueError):
        raise ValueError(f"progress_every must be a number of seconds, not {every!r}") from None
    if not 0 < x < 1e9:  # also NaN and inf: Event.wait cannot wait for ever in one call
        raise ValueError(f"progress_every must be positive and finite, not {every!r}")
    return x


def _duration(seconds: float) -> str:
    """12s, 3m05s, 2h01m"""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _isatty(out) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _columns(out) -> int:
    try:
        return os.get_terminal_size(out.fileno()).columns
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
    every: Optional[float] = None,
) -> Iterator[Optional[Progress]]:
    """Progress for the block (a bar or lines, :class:`Progress`), fed by the sidecars
    that appear in the local work directory ``work`` (one per finished input shard,
    ``pattern`` their name's end)."""
    if enabled is False or split_url(work)[0] != "":
        yield None
        return
    bar = Progress(total_shards, True, every)
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
