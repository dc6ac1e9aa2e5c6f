"""A custom jpegtran scan script for PCR conversion (``tar2tf pcr --scans FILE``).

jpegtran's ``-scans FILE`` replaces its standard progression with the scans listed in the
file (``components: Ss Se Ah Al;`` per scan).  The job carries the script's *text*, never
its path, so workers on other machines need no copy of the file: each worker process
writes the text once to a private temporary file for jpegtran (:func:`local_file`).

:func:`check` runs before a job starts, on a tiny 3-component JPEG made with Pillow, so a
bad script is one usage error rather than a reject per image.  It requires that jpegtran
accepts the script, that the result is progressive, and that every coefficient of every
component reaches full precision (a scan with ``Al = 0``).  jpegtran checks only the DC
coefficients (libjpeg's rule: AC coefficients are optional), so a script that never sends
some AC bits would silently lose detail; :func:`check` refuses it.

The script applies to 3-component images only (``transforms.pcr.image``): it names
component indexes, so it cannot fit grayscale or CMYK images, which keep jpegtran's
standard script and its scan-group map.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import io
import os
import subprocess
import tempfile
import threading
from typing import Dict, List, Optional

from transforms.pcr.image import JPEGTRAN_ARGS, SCRIPT_COMPONENTS, jpegtran_path
from transforms.pcr.jpeg_scans import JpegError, JpegLayout, parse
from transforms.stores import StoreConfig, get_store

_files: Dict[str, str] = {}
_lock = threading.Lock()


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read(path: str, config: Optional[StoreConfig] = None) -> str:
    """The text of a scan-script file (local, ``gs://``, ``ais://``); ValueError if unreadable."""
    try:
        data = get_store(path, config).read_bytes(path)
    except Exception as e:
        raise ValueError(
            f"scan script {path}: cannot read it: {e.__class__.__name__}: {e}"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"scan script {path}: not a text file ({e})") from None


def local_file(text: str) -> str:
    """A file on this machine holding ``text``: one per process and script, made on first
    use (again if something removed it) and deleted when the process exits."""
    key = digest(text)
    with _lock:
        path = _files.get(key)
        if path is None or not os.path.exists(path):
            fd, path = tempfile.mkstemp(prefix="tar2tf-scans-", suffix=".txt")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            atexit.register(_remove, path)
            _files[key] = path
    return path


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@functools.lru_cache(maxsize=1)
def _probe() -> bytes:
    """A 32x24 colour JPEG (4:2:0, two MCU rows), made with Pillow."""
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:24, 0:32]
    rgb = np.stack([x * 8, y * 10, (x * y) % 256], axis=-1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "JPEG", quality=90)
    return out.getvalue()


def _no_scans(text: str) -> bool:
    return not "".join(line.split("#", 1)[0] for line in text.splitlines()).strip()


def incomplete(layout: JpegLayout) -> List[str]:
    """What the scans never send to full precision, e.g. ``component 2 coefficients 1-63``."""
    out = []
    for c in range(layout.components):
        done = [False] * 64
        for s in layout.scans:
            if c in s.components and s.al == 0:
                for k in range(s.ss, s.se + 1):
                    done[k] = True
        missing = [k for k in range(64) if not done[k]]
        if missing:
            runs, start = [], missing[0]
            for a, b in zip(missing, missing[1:] + [None]):
                if b != a + 1:
                    runs.append(f"{start}" if start == a else f"{start}-{a}")
                    start = b
            out.append(
                f"component {c} coefficient{'s' if len(missing) > 1 else ''} {', '.join(runs)}"
            )
    return out


def check(text: str, name: str) -> JpegLayout:
    """The layout jpegtran writes with this script for a 3-component image; ValueError
    (naming ``name`` and saying why) unless it is a complete progressive JPEG."""
    if _no_scans(text):
        raise ValueError(f"scan script {name}: it lists no scans")
    exe = jpegtran_path()
    if exe is None:
        raise RuntimeError(
            "jpegtran not found: install libjpeg-turbo-progs (launch/setup.d/20-apt.sh)"
        )
    path = local_file(text)
    proc = subprocess.run(
        [exe, *JPEGTRAN_ARGS, "-scans", path], input=_probe(), capture_output=True, timeout=60
    )
    if proc.returncode != 0 or not proc.stdout:
        # the first line is the complaint (jpegtran prints its usage after some of them)
        lines = proc.stderr.decode("utf-8", "replace").replace(path, name).strip().splitlines()
        why = lines[0] if lines else f"exit {proc.returncode}"
        raise ValueError(
            f"scan script {name}: jpegtran rejects it for {SCRIPT_COMPONENTS}-component "
            f"images: {why}"
        )
    try:
        layout = parse(proc.stdout)
    except JpegError as e:  # not expected from jpegtran; said plainly if it happens
        raise ValueError(
            f"scan script {name}: jpegtran wrote an unreadable JPEG with it: {e}"
        ) from None
    if not layout.progressive:
        raise ValueError(
            f"scan script {name}: it is sequential (every scan is 0 63 0 0), "
            f"PCR needs a progressive script"
        )
    lost = incomplete(layout)
    if lost:
        raise ValueError(
            f"scan script {name}: it never sends {'; '.join(lost)} to full precision "
            f"(no scan with Al = 0), so images would lose detail"
        )
    return layout
