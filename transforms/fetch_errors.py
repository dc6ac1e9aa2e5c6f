"""The errors a streamed read of an object raises when it fails for good mid-object.

A module of their own, without the retry machinery (tenacity), so that the tar reader,
which every shard worker imports, can tell a failed fetch from a damaged archive without
importing what only the stores need.  ``transforms.retry`` raises them and re-exports them.
"""

from __future__ import annotations


class FetchError(IOError):
    """A streamed read failed for good (retries spent, or a permanent error) mid-object.

    An ``OSError``, so code reading a file handles it like any failed read; the tar reader
    turns it into a ``fetch`` reject saying where the stream broke."""


class ObjectChangedError(FetchError):
    """The object was replaced between two requests of one read (a resume after a fault,
    or a seek): going on would splice two versions, so the read fails.  Never retried --
    every retry would reopen the new version at the old offset.

    ``url`` names the object and ``detail`` says what changed where (``at byte N: ...``),
    for the ``fetch`` reject the tar reader makes of it."""

    def __init__(self, url: str, detail: str):
        super().__init__(f"{url}: object changed while being read ({detail}); not resuming into another version")
        self.url, self.detail = url, detail

    def __reduce__(self):  # crosses process boundaries (worker processes) with its fields
        return type(self), (self.url, self.detail)
