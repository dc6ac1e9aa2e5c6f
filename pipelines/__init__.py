"""Beam pipelines and the user-facing Python API of tar2tf.

``from pipelines import Dataset, default_record_parser`` is the stable entry point of the
original ``Dataset``/``AisDataset`` API (docs/api.md; loaded lazily, so Beam workers
importing ``pipelines.beam.convert`` do not pay for it).
"""

_API = {
    "Dataset": "pipelines.tfdata.dataset",
    "AisDataset": "pipelines.tfdata.dataset",
    "default_record_parser": "pipelines.tfdata.parsers",
    "make_record_parser": "pipelines.tfdata.parsers",
}

__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
