"""Where bytes live: a URL in, a :class:`Store` out.

Local paths, ``ais://``, ``gs://``, ``http(s)://``, ``s3://`` and any other Beam filesystem
share one small contract (``base.Store``); ``get_store(url)`` picks the backend and imports it
only when a URL of its scheme is used.  The retry policy and atomic uploads live beside them.
"""

from transforms.stores.base import Store, StoreConfig, basename, dirname, join, split_url
from transforms.stores.registry import (
    LOCAL_TEMP,
    BeamFileSystemStore,
    LocalStore,
    ParkableFile,
    get_store,
    local_temp_name,
)

__all__ = [
    "Store",
    "StoreConfig",
    "basename",
    "dirname",
    "join",
    "split_url",
    "LOCAL_TEMP",
    "BeamFileSystemStore",
    "LocalStore",
    "ParkableFile",
    "get_store",
    "local_temp_name",
]
