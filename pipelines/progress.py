"""Live progress for local runs: shards done/total, records, MB/s, ETA (tqdm).

Only drivers that run DoFns inside the launching process (FnApiRunner in-memory or
multi-threaded) see a bar; remote workers find no bar registered and skip it.  The bar is
quiet when stderr is not a TTY.  Every runner also gets Beam counters (see convert.py).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Dict, Optional

_BARS: Dict[str, "Progress"] = {}
_LOCK = threading.Lock()


class Progress:
    def __init__(self, job: str, total_shards: int, enabled: Optional[bool] = None):
        from tqdm import tqdm
        enabled = sys.stderr.isatty() if enabled is None else enabled
        # a terminal that reports 0 columns (some ptys, CI consoles) would get an empty bar
        sized = enabled and _columns() > 0
        self._bar = tqdm(total=total_shards, unit="shard", disable=not enabled, dynamic_ncols=sized,
                         ncols=None if sized else 100, nrows=None if sized else 24, desc="tar2tf")
        self._records = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self.job = job
        with _LOCK:
            _BARS[job] = self

    def shard_done(self, records: int, nbytes: int) -> None:
        with self._lock:
            self._records += records
            self._bytes += nbytes
            elapsed = max(self._bar.format_dict.get("elapsed", 0.0), 1e-6)
            self._bar.set_postfix(records=self._records, MBps=f"{self._bytes / 1e6 / elapsed:.1f}",
                                  refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
        with _LOCK:
            _BARS.pop(self.job, None)


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def get(job: str) -> Optional[Progress]:
    return _BARS.get(job)
