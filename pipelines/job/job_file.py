"""What a job is, recorded in its work directory (``job.json``), so that a refused
``--resume`` can say why.

A job's work directory is named by a fingerprint of its inputs, options and tar2tf
version (and, for TFRecord jobs, its output): a rerun of the same command finds the
interrupted run's work there, and a rerun with an option changed finds an empty
directory.  Each job writes its record (the fingerprinted values) there when it starts;
the directory is removed when the job finishes.  A job that finds its own directory empty
under ``resume`` reads the records beside it: one of an interrupted run that is the same
job but for its options (or tar2tf version) names the options that differ, then and now.
The pipelines decide which keys make the same job (``same``) and what the refusal says.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, List, Optional, Sequence

from transforms.stores import StoreConfig, get_store, join

JOB_FILE = "job.json"
VERSION = "v"  # the record's key for the tar2tf version
OPTIONS = "options"  # and for the options, compared key by key

# how a value is shown in a difference: (option name, value) -> text
Shown = Callable[[str, Any], str]


def shown_as_json(key: str, value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@dataclasses.dataclass
class Conflict:
    """An interrupted run of the same job with other options (or tar2tf version)."""

    work: str  # its work directory
    differences: List[str]  # "name: <value then> then, <value now> now", by option name

    def describe(self) -> str:
        return "; ".join(self.differences)


def write(work: str, record: Dict[str, Any], config: Optional[StoreConfig] = None) -> None:
    """Put the job's record into its work directory (done when the job starts)."""
    from transforms.redact import redact_obj  # inputs and options may quote a signed URL

    get_store(work, config).write_bytes(
        join(work, JOB_FILE), json.dumps(redact_obj(record), sort_keys=True).encode()
    )


def differences(
    then: Dict[str, Any], now: Dict[str, Any], shown: Shown = shown_as_json
) -> List[str]:
    """The options (and version) of two records that differ, as "k: a then, b now"."""
    old, new = then.get(OPTIONS) or {}, now.get(OPTIONS) or {}
    out = [
        f"{k}: {shown(k, old.get(k))} then, {shown(k, new.get(k))} now"
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    ]
    if then.get(VERSION) != now.get(VERSION):
        out.append(f"tar2tf version: {then.get(VERSION)} then, {now.get(VERSION)} now")
    return out


def find_conflict(
    work: str,
    record: Dict[str, Any],
    config: Optional[StoreConfig] = None,
    same: Sequence[str] = ("inputs",),
    shown: Shown = shown_as_json,
) -> Optional[Conflict]:
    """The first (by name) work directory beside ``work`` whose record agrees with
    ``record`` on every key of ``same`` but not on its options or version; None if there
    is none.  Unreadable records are passed over (they explain nothing)."""
    from transforms.redact import redact_obj

    record = redact_obj(record)  # as written (:func:`write`)
    store = get_store(work, config)
    root = work.rstrip("/").rpartition("/")[0]
    prefix = root + "/"
    mine = work.rstrip("/")
    try:
        urls = sorted(store.list(prefix))
    except FileNotFoundError:
        return None
    for url in urls:
        parts = url[len(prefix) :].split("/") if url.startswith(prefix) else []
        if len(parts) != 2 or parts[1] != JOB_FILE or url.rpartition("/")[0] == mine:
            continue
        try:
            other = json.loads(store.read_bytes(url))
        except (OSError, ValueError):
            continue
        if (
            not isinstance(other, dict)
            or not isinstance(other.get(OPTIONS) or {}, dict)
            or any(other.get(k) != record.get(k) for k in same)
        ):
            continue
        diffs = differences(other, record, shown)
        if diffs:
            return Conflict(url.rpartition("/")[0], diffs)
    return None
