"""``TfdsImage``: the sample stage that ``--tfds-image NAME`` (``tfds_image=[NAME]``) adds
after a job's other stages.

TFDS decodes an ``Image`` feature when a split is read, so a record whose ``NAME`` is no
image TFDS can decode (text, a truncated JPEG, a GIF named ``.jpg``) would make every
``as_dataset`` of the split fail at that record.  The stage checks the entry as TFDS will
decode it (:func:`transforms.ops.images.check_tfds_image`) and leaves the record as it is;
a failed check is an ``op`` reject, counted like any other.
"""

from __future__ import annotations

from transforms.ops.base import Op
from transforms.record_types import Record


class TfdsImage(Op):
    """Check ``what`` as an image a TFDS ``Image`` feature of ``channels`` decodes.

    A record without the entry, or whose entry is not bytes (an array an op made), passes:
    the metadata step refuses such a feature for the whole job, with its own message."""

    def __init__(self, what: str, channels: int = 3):
        self.what, self.channels = what, int(channels)

    def _args(self):
        return (self.what,) + ((self.channels,) if self.channels != 3 else ())

    def value(self, record: Record, size_hint=None):
        return record.get(self.what)

    def __call__(self, record: Record) -> Record:
        v = record.get(self.what)
        if isinstance(v, (bytes, bytearray, memoryview)):
            from transforms.ops import images  # Pillow: only for a job that checks images

            images.check_tfds_image(v, self.channels)
        return record
