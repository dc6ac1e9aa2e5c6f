"""The names a TFRecord job writes: final shards from the output template, and the
companions beside them (manifest, rejects, ledger)."""

from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

from transforms.stores import LOCAL_TEMP, StoreConfig, basename, get_store, split_url

# -- names ------------------------------------------------------------------------------


def resolved(path: str) -> str:
    """A local path as a job uses it: absolute, with the symbolic links of its directory
    resolved, so that ``out/t-{}.record``, ``./out/t-{}.record``, ``$PWD/out/t-{}.record``
    or a path through a link to ``out`` are one output (one lock, one work directory, the
    same stale shards).  The last part is kept as given (a template, or a name that may be
    a link itself); a URL with a scheme (``gs://``, ``file://``) is returned as it is."""
    if not isinstance(path, str) or not path or "://" in path:
        return path
    head, tail = os.path.split(path)
    if tail in (".", ".."):
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(head or os.curdir), tail)


def respelt(path: str, resolved_output: str, given_output: str) -> str:
    """``path``, a file beside ``resolved_output`` (:func:`resolved`), as the caller spelt
    that output: its resolved directory replaced by the directory given."""
    if not given_output or given_output == resolved_output or "://" in path:
        return path
    have, want = os.path.dirname(resolved_output), os.path.dirname(given_output)
    if not path.startswith(have + os.sep):
        return path
    rest = path[len(have) + 1 :]
    return os.path.join(want, rest) if want else rest


def resolved_all(paths: List[str]) -> List[str]:
    """:func:`resolved` of each (a directory's links resolved once)."""
    dirs: dict = {}
    out = []
    for p in paths:
        if not isinstance(p, str) or not p or "://" in p:
            out.append(p)
            continue
        head, tail = os.path.split(p)
        if tail in (".", ".."):
            out.append(os.path.realpath(p))
            continue
        if head not in dirs:
            dirs[head] = os.path.realpath(head or os.curdir)
        out.append(os.path.join(dirs[head], tail))
    return out


def _split_ext(url: str) -> Tuple[str, str]:
    base = basename(url)
    stem, dot, ext = base.rpartition(".")
    if not dot or not stem:
        return url, ""
    return url[: len(url) - len(ext) - 1], "." + ext


# The shard-number field of an output template: ``{}`` or a Python format spec for an int,
# ``{:05d}`` (zero-padded names sort: ``sorted(glob(...))`` then reads shards in order).
_FIELD = re.compile(r"\{(?::([^{}]*))?\}")


def template_field(output: str) -> Optional["re.Match[str]"]:
    """The first shard-number field of ``output`` (``{}``, ``{:05d}``...), or None."""
    return _FIELD.search(output)


def is_template(output: str) -> bool:
    """Whether ``output`` numbers its shards through a field (``{}``, ``{:05d}``...)."""
    return template_field(output) is not None


def check_template(output: str) -> None:
    """ValueError unless ``output`` has at most one field and that field writes a shard
    number as decimal digits (``{}``, ``{:05d}``, ``{:03}``; not ``{:x}`` or ``{:5d}``,
    whose names hold letters or spaces and would not be found again as this output's)."""
    fields = _FIELD.findall(output)
    if len(fields) > 1:
        raise ValueError(
            f"output may contain only one shard-number field ('{{}}' or '{{:05d}}'), not {output!r}"
        )
    if not fields:
        return
    spec = fields[0]
    for n in (1, 12, 123456):
        try:
            text = format(n, spec)
        except ValueError as e:
            raise ValueError(
                f"output field '{{:{spec}}}' cannot format a shard number: {e}"
            ) from None
        if not (text.isascii() and text.isdigit() and int(text) == n):
            raise ValueError(
                f"output field '{{:{spec}}}' writes shard {n} as {text!r}: use decimal digits, "
                "e.g. '{:05d}' (zero-padded, so the names sort)"
            )


def fill(output: str, n: int) -> str:
    """``output`` with its field replaced by shard number ``n`` (``t-{:03d}`` -> ``t-007``)."""
    m = template_field(output)
    return output[: m.start()] + format(n, m.group(1) or "") + output[m.end() :]


def shard_names(output: str, n: int) -> List[str]:
    """Final shard URLs: a field (``{}``, ``{:05d}``) -> 1..n; otherwise
    ``<stem>-00000-of-0000n<ext>``."""
    if is_template(output):
        return [fill(output, i + 1) for i in range(n)]
    stem, ext = _split_ext(output)
    return [f"{stem}-{i:05d}-of-{n:05d}{ext}" for i in range(n)]


def streams_names(output: str) -> bool:
    """Whether shard names are known before the shard count is (templates with a field)."""
    return is_template(output)


def shard_name(output: str, i: int, total: Optional[int]) -> str:
    """Final shard ``i`` (0-based) of ``total`` (None: a template, which needs no count);
    one name of :func:`shard_names`."""
    if is_template(output):
        return fill(output, i + 1)
    stem, ext = _split_ext(output)
    return f"{stem}-{i:05d}-of-{total:05d}{ext}"


def output_pattern(output: str) -> "re.Pattern[str]":
    """Regex matching any shard name this output template could produce (for stale files)."""
    m = template_field(output)
    if m:
        head, tail = output[: m.start()], output[m.end() :]
        return re.compile(re.escape(head) + r"\d+" + re.escape(tail) + r"\Z")
    stem, ext = _split_ext(output)
    return re.compile(re.escape(stem) + r"-\d{5,}-of-\d{5,}" + re.escape(ext) + r"\Z")


def prefix(output: str) -> str:
    """What every shard name of ``output`` starts with (to list a store's candidates)."""
    m = template_field(output)
    return output[: m.start()] if m else _split_ext(output)[0]


def companion(output: str, suffix: str) -> str:
    """``train-{}.record`` (or ``train-{:05d}.record``) -> ``train.record<suffix>``:
    manifest, rejects, report."""
    m = template_field(output)
    if m:
        head = re.sub(r"[-_.]\Z", "", output[: m.start()])
        output = head + output[m.end() :]
    return output + suffix


def stale_temporaries(output: str, config: Optional[StoreConfig] = None) -> List[str]:
    """Temporary files of this output's shards (and their ``.idx``), manifest and rejects
    file that a killed or failed job left in a local output directory (a ``kill -9`` can
    land while a shard is written)."""
    if split_url(output)[0] != "":
        return []  # object stores publish an object whole, or not at all
    d = os.path.dirname(output) or "."
    if not os.path.isdir(d):
        return []
    pat, out = output_pattern(output), []
    # the manifest's and the rejects' own (a full disk at the manifest step)
    beside = {os.path.basename(companion(output, s)) for s in (".manifest.json", ".rejects.jsonl")}
    for fn in sorted(os.listdir(d)):
        m = LOCAL_TEMP.match(fn)
        if m:
            name = m.group("name")
            if name in beside:
                out.append(os.path.join(os.path.dirname(output), fn))
                continue
            name = name[: -len(".idx")] if name.endswith(".idx") else name
            if pat.match(os.path.join(os.path.dirname(output), name)):
                out.append(os.path.join(os.path.dirname(output), fn))
    return out


def existing_outputs(output: str, config: Optional[StoreConfig] = None) -> List[str]:
    pat = output_pattern(output)
    store = get_store(output, config)
    return [u for u in store.list(prefix(output)) if pat.match(u)]
