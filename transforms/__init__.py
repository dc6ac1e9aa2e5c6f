"""Building blocks of tar2tf, each a plain function, generator or class; the Beam DoFns
and the in-process driver in ``pipelines`` are thin shells around them.

Data flows one way:
``tar.sources`` (shard URLs) -> ``tar.fetch`` / ``tar.reader`` / ``tar.grouping`` (tar
members grouped into records) -> ``ops`` (conversions, selections, stages) ->
``tfrecord.example`` (``tf.train.Example``) -> ``tfrecord.framing`` (TFRecord files) or
``pcr`` (Progressive Compressed Records).  ``shard_elements`` takes the same path to the
elements of the streamed ``tf.data`` load instead.

Beside that flow: ``record_types`` (the Record and Reject types every stage passes on),
``stores`` (where bytes are read and written: local disk, ais://, gs://, s3://, https://),
``sizes`` (byte sizes as people write them), ``lazynp`` (numpy imported at first use) and
``redact`` (no credentials or terminal escapes in what tar2tf writes or prints).
"""

__version__ = "0.2.0"
