"""Shard sources: expand a template into object URLs, check them against a listing.

A template is a location with bash brace ranges and lists (``train-{0000..0147}.tar``,
``{a,b}``, expanded in order by the ``braceexpand`` library) and/or glob characters
(``*``, ``?``, ``[..]``, matched against a listing).  Listing uses the template's literal
prefix, so object stores are paged over only what could match.

A name the template requires but the listing lacks is a ``list`` reject, never a silent
skip.  A listing that fails for good (an unreachable endpoint, a persistent 5xx, after the
store's retry policy gave up) makes each name it was asked for a ``list`` reject
(``listing failed: ...``, naming the endpoint and the error): one template's unreachable
store must not cost the job the shards of the other templates.

The result order is the template's order (brace order; sorted within a glob), and that
order is the order of records in the output.
"""

from __future__ import annotations

import functools
import re
from typing import List, Optional, Sequence, Tuple, Union

from braceexpand import braceexpand

from transforms.record_types import Reject
from transforms.stores import StoreConfig, get_store, join, split_url
from transforms.stores.retry import is_transient

_GLOB = re.compile(r"[*?\[]")
MISSING = "missing shard"  # the reason of a name the listing lacks (a glob that matched nothing)


def is_missing(reject: Reject) -> bool:
    """A ``list`` reject for a source that does not exist (not a listing that failed)."""
    return reject.stage == "list" and reject.reason.startswith(MISSING + ":")


def expand_braces(template: str) -> List[str]:
    """All names a brace template stands for, in order, duplicates removed."""
    seen, out = set(), []
    for name in braceexpand(template):
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def _literal_prefix(pattern: str) -> str:
    m = _GLOB.search(pattern)
    return pattern if m is None else pattern[: m.start()]


def resolve(
    templates: Union[str, Sequence[str]],
    base: Optional[str] = None,
    config: Optional[StoreConfig] = None,
) -> Tuple[List[str], List[Reject]]:
    """Turn templates into an ordered list of shard URLs plus ``list`` rejects.

    ``base`` (a directory, ``ais://bucket`` or ``gs://bucket``) is prefixed to relative
    templates, as ``Dataset(bucket).load(template)`` does.
    """
    if isinstance(templates, str):
        templates = [templates]
    urls: List[str] = []
    rejects: List[Reject] = []
    seen = set()
    for template in templates:
        if base and "://" not in template and not template.startswith("/"):
            template = join(base, template)
        found, missing, failed = _resolve_one(template, config)
        for u in found:
            if u not in seen:
                seen.add(u)
                urls.append(u)
        for u in missing:
            rejects.append(
                Reject(
                    u,
                    None,
                    "list",
                    f"{MISSING}: {u} is not in the listing",
                    counts_record=False,
                )
            )
        for u, why in failed:
            rejects.append(
                Reject(u, None, "list", f"listing failed: {u}: {why}", counts_record=False)
            )
    return urls, rejects


def _resolve_one(template: str, config: Optional[StoreConfig]):
    store = get_store(template, config)
    names = expand_braces(template)
    if not getattr(store, "listable", True):  # http(s): no listing, each name is one shard
        return store.expand(template, names), [], []
    exact = [n for n in names if not _GLOB.search(split_url(n)[2])]
    globs = [n for n in names if _GLOB.search(split_url(n)[2])]
    found: List[str] = []
    missing: List[str] = []
    failed: List[Tuple[str, str]] = []  # (name or glob, why its listing failed)
    if exact:
        prefix = _common_prefix(exact)
        try:
            listed = set(store.list(prefix))
        except Exception as e:
            # No per-name lookup here: against a dead endpoint each one would spend the
            # whole retry budget again, for thousands of names.
            why = _listing_error(store, prefix, e)
            failed.extend((n, why) for n in exact)
        else:
            for n in exact:
                (found if n in listed or _confirmed(store, n) else missing).append(n)
    for g in globs:
        try:
            matches = sorted(u for u in store.list(_literal_prefix(g)) if glob_match(u, g))
        except Exception as e:
            failed.append((g, _listing_error(store, _literal_prefix(g), e)))
            continue
        if not matches:
            missing.append(g)
        found.extend(matches)
    # keep template order for exact names, glob matches in place of their pattern
    order = {n: i for i, n in enumerate(names)}
    found.sort(key=lambda u: (order.get(u, _glob_index(u, globs, order)), u))
    return found, missing, failed


def _listing_error(store, prefix: str, e: BaseException) -> str:
    """One line: which listing, at which endpoint, why, and whether it was retried (the
    store's own policy already retried a transient fault before it got here)."""
    where = store.endpoint_name() if hasattr(store, "endpoint_name") else ""
    how = "retries spent" if is_transient(e) else "not retryable"
    msg = " ".join(str(e).split()) or "no message"
    return (
        f"could not list {prefix}"
        + (f" at {where}" if where else "")
        + f" ({how}): {type(e).__name__}: {msg}"
    )


def _confirmed(store, url: str) -> bool:
    """A name the listing lacks, looked up directly before it becomes a reject: object
    store listings can miss names (AIS 5.0 pages names that share a directory's name as
    prefix out of order, see docs/object-stores.md), a direct lookup does not."""
    try:
        return store.exists(url)
    except Exception:
        return False


def glob_match(url: str, pattern: str) -> bool:
    """Shell-style matching where ``*``, ``?`` and ``[...]`` stay within one path segment, as
    in a shell, gsutil and Beam's filesystems.  ``**`` as a whole segment matches zero or
    more directories (``src/**/*.tar`` takes ``src/a.tar`` and ``src/x/y/a.tar``), as
    Python's recursive glob and gsutil do; ``**`` inside a segment (``src/**.tar``) matches
    any characters, ``/`` included, as in gsutil.  (``fnmatch`` alone lets ``*`` match
    ``/``: ``data/*.tar`` would take ``data/old/x.tar`` too.)"""
    return _glob_regex(pattern).match(url) is not None


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> "re.Pattern[str]":
    parts = pattern.split("/")
    out = []
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            # zero or more whole segments; at the end, anything below
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment_regex(seg) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.S)


def _segment_regex(seg: str) -> str:
    """One path segment's glob as a regex, with fnmatch's rules for ``[...]`` (``[!..]``
    negates, a ``]`` first is literal, an unclosed ``[`` is literal)."""
    out, i, n = [], 0, len(seg)
    while i < n:
        c = seg[i]
        i += 1
        if c == "*":
            if i < n and seg[i] == "*":
                while i < n and seg[i] == "*":
                    i += 1
                out.append(".*")
            else:
                out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i
            if j < n and seg[j] == "!":
                j += 1
            if j < n and seg[j] == "]":
                j += 1
            while j < n and seg[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
                continue
            body = seg[i:j]
            i = j + 1
            body = re.sub(r"([\\&~|\[])", r"\\\1", body)
            if body.startswith("!"):
                body = "^" + body[1:]
            elif body.startswith("^"):
                body = "\\" + body
            try:
                re.compile(f"[{body}]")
            except re.error:  # a reversed range (``[z-a]``): matches nothing, as in fnmatch
                out.append("(?!)")
                continue
            out.append(f"(?!/)[{body}]")
        else:
            out.append(re.escape(c))
    return "".join(out)


def _glob_index(url, globs, order):
    for g in globs:
        if glob_match(url, g):
            return order[g]
    return len(order)


def _common_prefix(names: List[str]) -> str:
    import os

    prefix = os.path.commonprefix(names)
    if "://" in prefix or "/" in prefix:
        return prefix
    return prefix if prefix else ""
