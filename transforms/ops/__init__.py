"""The public op namespace: ``from transforms.ops import Decode, Resize, Select, ...``.

Conversions rewrite one record entry (``conversions``), selections pick what a record
becomes (``selections``), and the go-tfdata stages transform whole samples or Examples
(``gostages``).  ``docs/ops.md`` documents them all.
"""

from transforms.ops.base import Op, OpError, walk
from transforms.ops.conversions import (
    Convert,
    Decode,
    Encode,
    Func,
    Resize,
    Rotate,
    fuse,
    random_angle,
    with_seed,
)
from transforms.ops.gostages import (
    BYTES,
    FLOAT,
    INT64,
    ByExampleF,
    ByKey,
    ByKeyValue,
    ByPrefix,
    BySampleF,
    BySubstring,
    BySuffix,
    FeatureType,
    FilterEmptyExamples,
    FilterEmptySamples,
    Rename,
    SampleF,
    SampleToTFExample,
    TFExampleF,
    as_stage,
)
from transforms.ops.selections import Select, SelectDict, SelectJSON, SelectList, as_selection

__all__ = [
    "Op",
    "OpError",
    "Decode",
    "Convert",
    "Resize",
    "Rotate",
    "Func",
    "Encode",
    "random_angle",
    "with_seed",
    "fuse",
    "walk",
    "Select",
    "SelectJSON",
    "SelectList",
    "SelectDict",
    "as_selection",
    "ByKey",
    "ByKeyValue",
    "ByPrefix",
    "BySuffix",
    "BySubstring",
    "BySampleF",
    "ByExampleF",
    "Rename",
    "SampleF",
    "TFExampleF",
    "FilterEmptySamples",
    "FilterEmptyExamples",
    "SampleToTFExample",
    "FeatureType",
    "BYTES",
    "INT64",
    "FLOAT",
    "as_stage",
]
