"""The request headers of ``http(s)://`` shards as a job's config holds them
(``StoreConfig.http_headers``, ``http_cross_origin``): parsed and checked here, their
defaults read from the environment where the config is made.  Apart from
:mod:`transforms.stores.http`, so that the config's defaults need no store."""

from __future__ import annotations

import os
import re
from typing import Dict, List, Tuple

HEADERS_ENV = "TAR2TF_HTTP_HEADERS"
CROSS_ORIGIN_ENV = "TAR2TF_HTTP_HEADER_CROSS_ORIGIN"  # "1": headers follow any redirect
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # an HTTP header name (RFC 9110 token)


def parse_header(text: str) -> Tuple[str, str]:
    """``"Name: value"`` -> (name, value).  The error names the header, never its value."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not _NAME.match(name) or "\n" in value or "\r" in value:
        shown = name if _NAME.match(name) else "header"
        raise ValueError(f"--http-header / ${HEADERS_ENV}: {shown!s}: expected 'Name: value'")
    return name, value.strip()


def env_headers() -> Dict[str, str]:
    """The headers ``$TAR2TF_HTTP_HEADERS`` holds (one ``Name: value`` per line)."""
    out: Dict[str, str] = {}
    for line in (os.environ.get(HEADERS_ENV) or "").splitlines():
        if line.strip():
            name, value = parse_header(line)
            out[name] = value
    return out


def headers_with(lines: List[str]) -> Tuple[Tuple[str, str], ...]:
    """``$TAR2TF_HTTP_HEADERS`` with ``--http-header`` values over it, each checked; a
    header named twice keeps the last value: what ``StoreConfig.http_headers`` holds."""
    merged = env_headers()
    for line in lines:
        name, value = parse_header(line)
        merged[name] = value
    return tuple(merged.items())


def env_cross_origin() -> bool:
    """The default of ``StoreConfig.http_cross_origin``."""
    return os.environ.get(CROSS_ORIGIN_ENV, "") == "1"
