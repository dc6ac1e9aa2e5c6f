"""Glob templates: ``*``, ``?`` and ``[...]`` stay within a path segment; a ``**`` segment
matches zero or more directories (``src/**/*.tar`` takes ``src/a.tar`` too, as Python's
recursive glob and gsutil do), for local paths and for every store's listing."""

from __future__ import annotations

import glob
import os

import pytest

from transforms.stores import StoreConfig
from transforms.tar.sources import glob_match, resolve

# a tree with files at every depth, and names that only a wrong matcher would take
NAMES = (
    "src/a.tar",
    "src/b.tar",
    "src/x/c.tar",
    "src/x/y/d.tar",
    "src/x/notes.txt",
    "srcx/e.tar",
    "src.tar",
    "other/src/f.tar",
)
# pattern -> the names it must match (in the resolved order: sorted within a glob)
EXPECT = {
    "src/**/*.tar": ["src/a.tar", "src/b.tar", "src/x/c.tar", "src/x/y/d.tar"],
    "src/*.tar": ["src/a.tar", "src/b.tar"],
    "src/**": ["src/a.tar", "src/b.tar", "src/x/c.tar", "src/x/notes.txt", "src/x/y/d.tar"],
    "src/**/c.tar": ["src/x/c.tar"],
    "src/**/y/*.tar": ["src/x/y/d.tar"],
    "src/**.tar": ["src/a.tar", "src/b.tar", "src/x/c.tar", "src/x/y/d.tar"],
    "src/[ab].tar": ["src/a.tar", "src/b.tar"],
    "src/[!a].tar": ["src/b.tar"],
    "src/?.tar": ["src/a.tar", "src/b.tar"],
    "src/x/**/*.tar": ["src/x/c.tar", "src/x/y/d.tar"],
}


def test_double_star_segment_is_zero_or_more_directories():
    assert glob_match("src/a.tar", "src/**/*.tar")
    assert glob_match("src/x/y/a.tar", "src/**/*.tar")
    assert not glob_match("srcx/a.tar", "src/**/*.tar")
    assert not glob_match("src/x/a.tar", "src/*.tar")
    assert glob_match("s3://b/src/a.tar", "s3://b/src/**/*.tar")
    assert glob_match("gs://b/a.tar", "gs://b/**/a.tar")
    # a class never matches "/", even negated
    assert not glob_match("src/a/b.tar", "src/a[!x]b.tar")
    assert not glob_match("src/a.tar", "src/[z-a].tar")  # a reversed range matches nothing


def test_local_globs_agree_with_python_recursive_glob(tmp_path):
    for n in NAMES:
        (tmp_path / n).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / n).write_bytes(b"x")
    for pattern, want in EXPECT.items():
        urls, rejects = resolve(pattern, base=str(tmp_path))
        assert urls == [str(tmp_path / n) for n in want], pattern
        assert rejects == []
        if "**." not in pattern:  # in-segment ** is gsutil's, not Python's
            py = sorted(
                p for p in glob.glob(str(tmp_path / pattern), recursive=True) if os.path.isfile(p)
            )
            assert sorted(urls) == py, pattern


def _check_store(url_of, config: StoreConfig) -> None:
    for pattern, want in EXPECT.items():
        urls, rejects = resolve(url_of(pattern), config=config)
        assert urls == [url_of(n) for n in want], pattern
        assert rejects == [], pattern


@pytest.mark.ais
@pytest.mark.gcs
def test_object_store_globs(backend):
    for n in NAMES:
        backend.put(n, b"x")
    _check_store(backend.url, backend.config())


def test_s3_globs(moto_server, s3_env):
    bucket = moto_server.new_bucket()
    for n in NAMES:
        moto_server.put(bucket, n, b"x")
    _check_store(lambda n: f"s3://{bucket}/{n}", StoreConfig(s3_endpoint=moto_server.url))
