"""tf.train.Example encoding, the type map and schema, TFRecord framing with masked CRC32C, and whole-file digests."""
