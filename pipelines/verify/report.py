"""What ``tar2tf verify`` reports: the problems it found and the counts of what it read.

Nothing stops at the first problem: every check appends to one :class:`VerifyReport`, and a
shard's problems are listed up to a bound (:func:`adder`) so a shard damaged throughout
does not bury the others'.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional


class NotAManifest(ValueError):
    """JSON, but not a manifest a tar2tf job wrote (``tar2tf verify`` exits 2)."""


@dataclasses.dataclass
class Problem:
    # file, size, crc32c/sha256/digest, crc, format (ArrayRecord), count, schema, image,
    # index, totals, rejects, pcr
    check: str
    detail: str
    shard: Optional[str] = None
    record: Optional[int] = None  # record number inside the shard, from 0
    key: Optional[str] = None

    def line(self) -> str:
        where = self.shard or "manifest"
        if self.record is not None:
            where += f" record {self.record}"
        if self.key:
            where += f" ({self.key})"
        return f"{self.check:8s} {where}: {self.detail}"


@dataclasses.dataclass
class VerifyReport:
    manifest: str
    kind: str = "tfrecord"
    shards_checked: int = 0
    records_checked: int = 0
    bytes_checked: int = 0
    images_decoded: int = 0
    problems: List[Problem] = dataclasses.field(default_factory=list)
    max_listed_per_shard: int = 20

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        return d

    def text(self) -> str:
        # PCR's own words: its files are "record files" that each hold many images
        files, items = ("record files", "images") if self.kind == "pcr" else ("shards", "records")
        lines = [
            f"{'OK' if self.ok else 'MISMATCH'}: {self.manifest} ({self.kind}): "
            f"{self.shards_checked} {files}, {self.records_checked} {items}, "
            f"{self.bytes_checked} bytes"
            + (f", {self.images_decoded} images decoded" if self.images_decoded else "")
        ]
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s):")
            lines.extend("  " + p.line() for p in self.problems)
        return "\n".join(lines)


def adder(report: VerifyReport, path: str):
    """``add(check, detail, record=None, key=None)``: a problem of the shard at ``path``,
    listed up to ``report.max_listed_per_shard`` times, then once more as "further"."""
    shown = 0

    def add(check, detail, record=None, key=None):
        nonlocal shown
        shown += 1
        if shown <= report.max_listed_per_shard:
            report.problems.append(Problem(check, detail, path, record, key))
        elif shown == report.max_listed_per_shard + 1:
            report.problems.append(
                Problem(check, "... further problems in this shard not listed", path)
            )

    return add


def guarded(report: VerifyReport, path: str, check, *args) -> None:
    """Run one file's ``check``; a file that cannot be read (not a regular file, refused,
    gone, more than memory holds) is a problem listed for it, and the next one is checked."""
    try:
        check(*args)
    except (Exception, MemoryError) as e:
        what = str(e) if isinstance(e, OSError) and str(e) else f"{type(e).__name__}: {e}"
        report.problems.append(Problem("file", f"cannot be read: {what[:300]}", path))
