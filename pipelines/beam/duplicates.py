"""The duplicate-key check spread over the workers (``pipelines.job.kinds.tfrecord.duplicates``).

    summaries -> DuplicateRows:   each bundle reads its pieces' key hashes (many at a
                                  time) and splits the rows by the hash's leading
                                  BUCKET_BITS bits -> (bucket, rows)
              -> DuplicateGroup:  GroupByKey(bucket)
              -> DuplicateScan:   one bucket's rows sorted and scanned -> (count, examples)
              -> gathered, merged by the Manifest step

No worker holds more than one bucket's rows, and none writes per-record scratch files:
the runner's shuffle carries the rows (24 bytes a record).  The bucket count is fixed,
so the graph does not depend on the data: 2^10 buckets hold a million rows each at 10^9
records.
"""

from __future__ import annotations

from typing import Dict, List

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipelines.beam.distribute import gather
from pipelines.job import external, inflight
from pipelines.job.kinds.tfrecord import duplicates, piecefiles

BUCKET_BITS = 10
BATCH = 256  # pieces whose record files a bundle reads at once


class _BucketRows(beam.DoFn):
    """Pieces -> ``(bucket, rows bytes)``, one element per bucket a batch of pieces fills."""

    def __init__(self, store):
        self.store = store

    def start_bundle(self):
        self.batch: List = []

    def process(self, piece):
        if piece.records:
            self.batch.append(piece)
        if len(self.batch) >= BATCH:
            yield from self._flush()

    def finish_bundle(self):
        for kv in self._flush():
            yield WindowedValue(kv, MIN_TIMESTAMP, [GlobalWindow()])

    def _flush(self):
        batch, self.batch = self.batch, []
        if not batch:
            return
        parts: Dict[int, List[np.ndarray]] = {}

        def hashes(p):
            return piecefiles.member(p, "hashes", self.store)

        for p, h in inflight.ordered(hashes, batch):
            for b, part in external.split(duplicates.rows_of(p, h), BUCKET_BITS):
                parts.setdefault(b, []).append(part)
        for b, chunks in sorted(parts.items()):
            yield b, np.concatenate(chunks).tobytes()


def _scan(item):
    _, chunks = item
    rows = np.frombuffer(b"".join(chunks), dtype=duplicates.ROW)
    return duplicates.scan(rows)


def found(summaries: beam.PCollection, store, label: str = "Duplicate") -> beam.PCollection:
    """One element: the list of every bucket's ``(count, examples)``
    (``duplicates.merge`` makes them one)."""
    scans = (
        summaries
        | f"{label}Rows" >> beam.ParDo(_BucketRows(store))
        | f"{label}Group" >> beam.GroupByKey()
        | f"{label}Scan" >> beam.Map(_scan)
    )
    return gather(scans, f"{label}Gather")
