"""A job's outputs never land on its inputs.

``--overwrite`` replaces the files under the output's names and deletes stale shards of
earlier runs.  If an input matched those names (inputs ``data-{1..3}.tar``, output
``data-{}.tar``), the job would replace or delete its own inputs, possibly before reading
them.  So, before anything is written or deleted, every path the job may write or delete
is held against every input; a collision is an :class:`OutputOverlapsInput` (a
``ValueError``: the CLI's exit status 2, one line), whether ``--overwrite`` was given or
not.

What the job may write or delete: for ``convert``, any name the output template can
produce (its shards, for any shard count: stale ones are deleted too) and their DALI
``.idx`` files, the manifest and rejects file, and the work directory (deleted as a
whole); for ``pcr``, the output directory's record files, index, manifest and rejects
file, and its work directory.  A path collides with an input when it equals the input or
lies inside it (an ImageFolder root), or when the input lies inside a directory the job
deletes.  Local paths are compared both as given (made absolute) and with symbolic links
resolved: replacing a symbolic link named like an output loses the user's input name too.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, List, Sequence, Set

from pipelines.job import names
from transforms.stores import split_url


class OutputOverlapsInput(ValueError):
    """An output path equals, or lies inside, an input path (or the input lies in the
    work directory the job deletes)."""


def _forms(path: str) -> Set[str]:
    """The spellings of one path that can name the same file: a local path absolute and
    resolved; a URL with repeated slashes collapsed and no trailing slash."""
    scheme, bucket, key = split_url(path)
    if scheme:
        key = re.sub(r"/{2,}", "/", key).strip("/")
        return {f"{scheme}://{bucket}/{key}".rstrip("/")}
    a = os.path.abspath(os.path.expanduser(key))
    return {a, os.path.realpath(a)}


def _dir_forms(path: str) -> Set[str]:
    """:func:`_forms` of a file that need not exist yet: its directory resolved, its own
    name kept (it may be a template holding ``{}``)."""
    scheme, _, _ = split_url(path)
    if scheme:
        return _forms(path)
    a = os.path.abspath(os.path.expanduser(split_url(path)[2]))
    head, name = os.path.split(a)
    if names.is_template(head):  # a template in the directory part: compared as written
        return {a}
    return {a, os.path.join(os.path.realpath(head), name)}


def _inside(path: str, root: str) -> bool:
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/")


def _refuse(what: str, path: str, inp: str) -> None:
    raise OutputOverlapsInput(
        f"{what} {path} would overwrite or delete the input {inp}: "
        f"choose an output (and work directory) apart from the inputs"
    )


def check_convert(
    output: str, inputs: Sequence[str], work: str, companions: Iterable[str] = ()
) -> None:
    """Refuse a TFRecord job whose outputs collide with one of ``inputs`` (see the module
    docstring); ``companions``: the other files it writes beside its shards (manifest,
    rejects file, and the like)."""
    patterns = [names.output_pattern(o) for o in _dir_forms(output)]
    named = {f: c for c in companions for f in _forms(c)}
    works = _forms(work)
    for inp in inputs:
        for f in _forms(inp):
            for pat in patterns:
                if pat.match(f) or (f.endswith(".idx") and pat.match(f[: -len(".idx")])):
                    _refuse("output shard name", output, inp)
            if f in named:
                _refuse("output file", named[f], inp)
            for w in works:
                if _inside(f, w) or _inside(w, f):
                    _refuse("work directory", work, inp)


def check_pcr(
    output: str,
    inputs: Sequence[str],
    work: str,
    files: Sequence[str],
    record_re: "re.Pattern[str]",
) -> None:
    """Refuse a PCR job whose outputs collide with one of ``inputs`` (files, or an
    ImageFolder root): the output directory or work directory inside (or equal to) an
    input, an input inside the work directory, or an input named like one of the
    directory's record files (``record_re``, matched on the name) or ``files`` (index,
    manifest, rejects file)."""
    outs = _forms(output)
    named = {f: c for c in files for f in _forms(c)}
    works = _forms(work)
    for inp in inputs:
        for f in _forms(inp):
            for o in outs:
                if _inside(o, f):
                    _refuse("output directory", output, inp)
                head, _, name = f.rpartition("/")
                if head == o and record_re.match(name):
                    _refuse("output record file", f, inp)
            if f in named:
                _refuse("output file", named[f], inp)
            for w in works:
                if _inside(f, w) or _inside(w, f):
                    _refuse("work directory", work, inp)


def inputs_named(inputs: Sequence[str], paths: Iterable[str]) -> List[str]:
    """The ``paths`` that are one of the ``inputs`` (in any spelling): what a clean-up
    must never delete, whatever else says it may."""
    forms = set()
    for inp in inputs:
        forms |= _forms(inp)
    return [p for p in paths if _forms(p) & forms]
