"""The two values that flow through every stage: a record and a reject.

A *record* is a plain ``dict``: ``__key__`` (str, the WebDataset key), ``__shard__``
(str, the source object it came from) and one entry per extension, whose value is
``bytes`` as read from the tar, or whatever an op turned it into (an ndarray, an int...).

A *reject* says why something was not written.  Stages are fixed so that counters and
reports can be grouped by them.  The conservation law every driver checks is::

    records read == records written + records rejected + records filtered

(a record *filtered* is one an op dropped on purpose, e.g. a stage returning ``None``:
not written, and not a reject either).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

KEY = "__key__"
SHARD = "__shard__"
META_KEYS = (KEY, SHARD)
# the in-memory stream's last sample stage puts a record's element under this name
ELEMENT = "__element__"
INTERNAL_FIELDS = (KEY, SHARD, ELEMENT)

STAGES = ("list", "fetch", "tar", "op", "encode", "write")

Record = Dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Reject:
    """Why a record (``key`` set) or a whole shard (``key`` None) was not written.

    ``counts_record`` is True when the reject stands for one record that was read
    (so it enters the conservation law); shard-level rejects (missing shard, not a tar)
    stand for no readable record and are counted separately.
    """

    shard: str
    key: Optional[str]
    stage: str
    reason: str
    counts_record: bool = True

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"unknown reject stage {self.stage!r}; expected one of {STAGES}")
        # a reason may quote a URL with a password or a signed query (an endpoint that
        # could not be listed): every place a reject goes gets it redacted
        from transforms.redact import redact

        for name in ("shard", "reason"):
            value = getattr(self, name)
            if isinstance(value, str):
                clean = redact(value)
                if clean != value:
                    object.__setattr__(self, name, clean)

    @property
    def kind(self) -> str:
        """A short, stable category for counters: the reason up to its first colon."""
        return self.reason.split(":", 1)[0].strip()

    def to_dict(self) -> Dict[str, Any]:
        return {
            "shard": self.shard,
            "key": self.key,
            "stage": self.stage,
            "reason": self.reason,
            "record": self.counts_record,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Reject":
        return cls(d["shard"], d.get("key"), d["stage"], d["reason"], d.get("record", True))


def is_reject(item: Any) -> bool:
    return isinstance(item, Reject)


def is_internal_name(name: str) -> bool:
    """Whether ``name`` is in the namespace of a record's internal fields: ``__key__``,
    ``__shard__``, ``__element__`` (:data:`INTERNAL_FIELDS`) and any ``__name__`` a later
    stage may add.  A tar member whose extension is such a name (``r1.__key__``) would
    overwrite the field with its bytes, so the reader rejects its record
    (:mod:`transforms.tar.grouping`).  The whole namespace is reserved, not only today's
    fields, so that an internal field added later never meets data that converted before."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def payload_keys(record: Record):
    """The extension entries of a record, in sorted order (meta keys excluded)."""
    return sorted(k for k in record if k not in META_KEYS)
