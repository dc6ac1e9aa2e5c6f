"""ArrayRecord files (``--format array_record``): one shard written from serialized
records, and read back for ``tar2tf verify`` (docs/arrayrecord.md)."""
