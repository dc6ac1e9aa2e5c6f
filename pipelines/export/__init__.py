"""Metadata that lets other loaders read a finished job's output (``tfds``: TensorFlow Datasets)."""
