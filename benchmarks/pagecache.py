"""Give every variant the same memory to write into: recycled, host-backed pages.

On a VM whose guest reports free memory to its host (Linux free page reporting: the
``page_reporting`` module, ``virtio_balloon``), memory that stays free for ~2 s is handed
back to the host, and the next time the guest uses it the host has to fault it in again:
writing a few hundred MB into the page cache then takes several times longer than into
pages freed a moment before.  The harness deletes each run's output, so a variant that
starts its timed region quickly after that (limit-io: no heavy imports) would write into
recycled pages, and one that first imports Beam or TensorFlow for a few seconds into pages
the host had taken back: the ratios would measure the imports' length.

:func:`recycle` writes a scratch file of about the size the run will write and deletes it,
right before the clock starts, for every variant alike.  The freed page-cache folios are
what the timed writes get next, as on a machine without page reporting (where memory is
always backed).  ``--no-recycle-pages`` turns it off (to see the raw effect).
"""

from __future__ import annotations

import os

CHUNK = 1 << 20


def _available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def recycle(directory: str, nbytes: int) -> int:
    """Write ``nbytes`` (at most a quarter of the available memory) to a scratch file in
    ``directory`` with 1 MB writes, never synced, and delete it: its dirty pages are
    dropped, not written to disk.  Returns the bytes written."""
    nbytes = min(nbytes, _available() // 4)
    if nbytes <= 0:
        return 0
    path = os.path.join(directory, ".recycle-pages")
    buf = b"\0" * CHUNK
    done = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while done < nbytes:
            done += os.write(fd, buf[: min(CHUNK, nbytes - done)])
    finally:
        os.close(fd)
        os.unlink(path)
    return done


def recycle_for(data, directory: str) -> int:
    """:func:`recycle` before a run on ``data`` (a :class:`benchmarks.dataset.BenchData`): the
    most a variant writes (a passthrough: about the input's size), plus room for its
    process's own memory."""
    return recycle(directory, data.tar_bytes + (128 << 20))
