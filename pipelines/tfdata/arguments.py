"""The original ``Dataset`` API's arguments, normalised: where the shards are, which ops
run, what is selected by default.

A bucket name and a proxy become an ``ais://`` URL, a directory an absolute path; the
conversions get the dataset's seed and are fused; with no selections, the original
API's default (a 224x224x3 float32 image and an int32 ``cls``) or, when conversions are
given, ``["jpg", "cls"]``.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from transforms import argcheck
from transforms.ops import Convert, Decode, Resize, fuse, leaves, with_seed
from transforms.stores import StoreConfig

IMAGE_SIZE = (224, 224)
#: the original API's default value: "jpg" decoded, resized to 224x224x3, float32 in [0, 1]
DEFAULT_VALUE = Convert(Resize(Decode("jpg"), IMAGE_SIZE), "float32")
#: what path= mode stores for it (uint8, 4x smaller); default_record_parser converts it
DEFAULT_STORED_VALUE = Resize(Decode("jpg"), IMAGE_SIZE)
DEFAULT_LABEL = "cls"


def location(source: str, proxy_url: Optional[str]) -> str:
    """The original API's bucket name + proxy -> ``ais://bucket``; URLs and directories unchanged."""
    if "://" in source:
        return source.rstrip("/")
    if os.path.isdir(source) or source.startswith((".", "/", "~")):
        return os.path.abspath(os.path.expanduser(source))
    if proxy_url or os.environ.get("AIS_ENDPOINT"):
        return "ais://" + source.strip("/")
    raise ValueError(
        f"{source!r} is not a directory; give proxy_url for an AIS bucket, or a URL "
        f"(ais://bucket, gs://bucket)"
    )


def conversions(ops: Sequence[Any], seed: int) -> List[Any]:
    """The conversions as they run: seeded, nested where they can be (``fuse``); each one
    an op or a callable ``record -> record``, else a ``TypeError`` naming it."""
    if isinstance(ops, (str, bytes)) or not isinstance(ops, (list, tuple, type(None))):
        raise TypeError(f"conversions must be a list of ops, not {ops!r}")
    for i, op in enumerate(ops or ()):
        if not callable(op):
            raise TypeError(
                f"conversions[{i}] must be an op (Decode('jpg'), ...) or a callable, not {op!r}"
            )
    return fuse(with_seed(list(ops or ()), seed))


def source(value: Any) -> str:
    """``Dataset``'s ``bucket_or_source``: a bucket name, URL or directory."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return argcheck.text("bucket_or_source", value, "a bucket name, URL or directory")


def template(value: Any) -> Any:
    """``load``'s ``template``: a shard template or a list of them."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) or (
        isinstance(value, (list, tuple)) and value and all(isinstance(t, str) for t in value)
    ):
        return value
    raise TypeError(
        f"template must be a shard template such as 'train-{{0..9}}.tar' (str) or a list of "
        f"them, not {value!r}"
    )


def dataset_options(remote_exec, seed, beam_args, max_member_size, remote_output, store) -> None:
    """The rest of ``Dataset``'s arguments, checked as ``ConvertConfig`` checks its own."""
    if remote_exec not in (None, True, False):
        raise TypeError(f"remote_exec must be None, True or False, not {remote_exec!r}")
    argcheck.count("seed", seed, -(2**63), 2**64 - 1, optional=False)
    if isinstance(beam_args, (str, bytes)) or not all(isinstance(a, str) for a in beam_args):
        raise TypeError(f"beam_args must be a list of str (['--runner=...']), not {beam_args!r}")
    argcheck.size("max_member_size", max_member_size)
    if remote_output is not None:
        argcheck.text("remote_output", remote_output, "a directory or bucket URL")
    if store is not None and not isinstance(store, StoreConfig):
        raise TypeError(f"store must be a StoreConfig, not {store!r}")


def selections(given: Optional[Sequence[Any]], converted: bool, seed: int) -> List[Any]:
    """The selections as they run; ``given`` None: the default for a dataset with
    (``converted``) or without conversions."""
    if given is None:
        given = ["jpg", DEFAULT_LABEL] if converted else [DEFAULT_VALUE, DEFAULT_LABEL]
    return leaves.normalize_selections(with_seed(list(given), seed))


def stored_selections(dataset) -> List[Any]:
    """What a written load stores: the default image as uint8 (the record parser makes it
    float32 again), any other selections as they are."""
    if dataset.defaulted and not dataset.conversions:
        return [DEFAULT_STORED_VALUE, DEFAULT_LABEL]
    return dataset.selections


def num_workers(n: Any) -> int:
    """``n``, checked: a positive integer (a bool is none)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"num_workers must be a positive integer, not {n!r}")
    return n
