"""Progressive Compressed Records: scan splitting, record layout, the index protobuf, reader,
verification and the quality report."""
