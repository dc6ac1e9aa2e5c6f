"""Checks of the local paths a conversion job will write (``--output``, ``--work-dir``,
``--summary-json``), made before the job starts.

Without them an output under a regular file or in ``/proc`` failed in a Beam worker, and
the user got Beam's log of the worker's traceback plus a chained one; a summary file in a
missing directory failed only after the job had written all its output.  Each failure
here is a :class:`launch.args.UsageError` naming the option, the path and the OS error.
Remote paths (``gs://``, ``ais://``) are left to the job: checking them would cost
requests and credentials before anything runs.
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
from typing import List

from launch.args import UsageError
from transforms.stores import split_url


def _is_local(path: str) -> bool:
    return split_url(path)[0] == ""


def _writable(flag: str, path: str, directory: str) -> None:
    """Raise unless a file can be made in the existing ``directory`` (a real try: as root,
    permission bits say yes to ``/proc`` and read-only mounts)."""
    if not os.path.isdir(directory):
        raise UsageError(f"{flag} {path}: {directory} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=directory):  # O_TMPFILE on Linux: never has a name
            pass
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write in {directory}: {e.strerror or e}") from None


def _nearest_existing(directory: str) -> str:
    d = os.path.abspath(directory)
    while not os.path.lexists(d):
        d = os.path.dirname(d)
    return d


def make_output_dir(flag: str, path: str, is_dir: bool = False) -> List[str]:
    """Create the local directory the job writes ``path`` into (``path`` itself when
    ``is_dir``), as the job would, and check that files can be made there.  Returns the
    directories it created, deepest first: :func:`remove_if_empty` takes them away again
    when the job stops before writing anything (a usage error found later)."""
    if not _is_local(path):
        return []
    directory = os.path.abspath(path if is_dir else (os.path.dirname(path) or "."))
    existing = _nearest_existing(directory)
    if not os.path.isdir(existing):  # makedirs would say "File exists"
        raise UsageError(f"{flag} {path}: {existing} is not a directory")
    created = []
    d = directory
    while d != existing:
        created.append(d)
        d = os.path.dirname(d)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"{flag} {path}: cannot create {e.filename or directory}: {e.strerror or e}"
        ) from None
    _writable(flag, path, directory)
    return created


def remove_if_empty(created: List[str]) -> None:
    """Remove the directories :func:`make_output_dir` created, deepest first, while they
    are empty: a job that stopped before writing anything leaves nothing behind."""
    for d in created:
        try:
            os.rmdir(
                d
            )  # fails on a directory the job (or anyone) wrote into: keep it and its parents
        except OSError:
            return


def check_dir_to_be(flag: str, directory: str) -> None:
    """``directory`` will be created by the job: its nearest existing ancestor must be a
    directory files can be made in.  Nothing is created now (a job stopped by a usage
    error must not leave an empty work dir behind)."""
    if _is_local(directory):
        _writable(flag, directory, _nearest_existing(directory))


def check_file_to_write(flag: str, path: str) -> None:
    """``path`` will be opened for writing by this process after the job: its directory
    must exist (nothing creates it) and take files; ``path`` must not be a directory."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: {os.strerror(errno.EISDIR)}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.lexists(parent):
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    _writable(flag, path, parent)


def write_file(flag: str, path: str, text: str) -> bool:
    """Write ``text`` to ``path``; False (said in one line on stderr) if that fails now
    although :func:`check_file_to_write` passed before the job."""
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError as e:
        print(f"tar2tf: cannot write {flag} {path}: {e.strerror or e}", file=sys.stderr)
        return False
