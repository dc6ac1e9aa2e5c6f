"""The public op namespace: ``from transforms.ops import Decode, Resize, Select, ...``.

Conversions rewrite one record entry (``conversions``), selections pick what a record
becomes (``selections``), and the go-tfdata stages transform whole samples or Examples
(``gostages``).  ``docs/ops.md`` documents them all.

The names load on first use: a worker process that imports one submodule (the stage runner,
the image-size limit) does not pay for Pillow and numpy unless its ops need them.
"""

_WHERE = {
    "transforms.ops.base": ("Op", "OpError", "walk"),
    "transforms.ops.conversions": (
        "Convert",
        "Decode",
        "Encode",
        "Func",
        "Resize",
        "Rotate",
        "fuse",
        "random_angle",
        "with_seed",
    ),
    "transforms.ops.gostages": (
        "BYTES",
        "FLOAT",
        "INT64",
        "ByExampleF",
        "ByKey",
        "ByKeyValue",
        "ByPrefix",
        "BySampleF",
        "BySubstring",
        "BySuffix",
        "FeatureType",
        "FilterEmptyExamples",
        "FilterEmptySamples",
        "Rename",
        "SampleF",
        "SampleToTFExample",
        "TFExampleF",
        "as_stage",
    ),
    "transforms.ops.selections": (
        "Select",
        "SelectDict",
        "SelectJSON",
        "SelectList",
        "as_selection",
    ),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name):
    if name in _MODULE:
        import importlib

        value = getattr(importlib.import_module(_MODULE[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'transforms.ops' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MODULE))
