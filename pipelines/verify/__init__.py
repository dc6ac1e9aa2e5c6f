"""Check a finished dataset against its manifest (``tar2tf verify``).

For a TFRecord dataset every shard is read once, streaming, and checked for:

* existence, byte size and digest (crc32c; sha256 in older manifests) against the manifest row;
* TFRecord framing: length and data CRCs of every record (``tfrecord.iter_frames``);
* record count against the manifest row;
* every ``tf.train.Example`` parsed and compared with the manifest schema (feature
  names, dtypes, fixed lengths, required features);
* optionally (``decode_images``) every image feature decoded with Pillow;
* the DALI ``.idx`` file, when the job wrote one, against the real record offsets.

An ArrayRecord dataset's shards are checked the same way, their records read by
``array_record`` instead of TFRecord framing, and with no DALI index.  Then the
manifest's own totals are checked against the shards (records, bytes, shard count), the
conservation rule ``read = written + rejected + filtered`` and the rejects file's line
count.  For a PCR dataset (manifest ``kind: pcr``) the record files are checked against
the manifest's rows, the index against the manifest's sha256, and the files against the
index by ``transforms.pcr.verify``.  Nothing stops at the first problem: the report
lists all of them.

A damaged manifest is a problem too (a JSON list, a row whose ``bytes`` is not a number, a
shard path that is not a readable regular file, a frame length beyond the shard's size):
the rows that can be checked still are.  A JSON object that no tar2tf job wrote (no
``"tool": "tar2tf"``, or a ``kind`` it does not write) is :class:`NotAManifest`.

One module an idea: ``report`` (the problems found, what was read), ``manifest`` (where
the manifest and its files are, its rows, its totals), ``hashing`` (a file's size and
digest, read once), ``examples`` (the schema check and image decoding both Example formats
share), ``tfrecord``, ``arrayrecord`` and ``pcr`` (one format each), and ``check``
(:func:`verify`, the whole run).
"""

from pipelines.verify.check import verify
from pipelines.verify.manifest import manifest_path_for
from pipelines.verify.report import NotAManifest, Problem, VerifyReport

__all__ = ["NotAManifest", "Problem", "VerifyReport", "manifest_path_for", "verify"]
