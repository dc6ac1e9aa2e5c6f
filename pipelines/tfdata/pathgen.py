"""The original ``Dataset`` API's ``path=<generator>``: output shard *i* goes to the *i*-th yielded name.

The number of shards is only known after packing, so the job writes to a temporary
``part-{}`` template first; each finished shard is then moved, in order, to the next
name the generator yields -- by ``os.replace`` when both are local (atomic), else by an
atomic store write followed by deleting the temporary shard.  The manifest (with the
final paths) and the rejects file are written beside the first shard, named after it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Iterator, List, Optional

from pipelines.job import manifest as job_manifest
from pipelines.job.names import companion
from pipelines.job.refused import OVERWRITE, OutputExistsError
from transforms.stores import StoreConfig, get_store, split_url

COPY_CHUNK = 4 << 20


def _move(src: str, dst: str, config: Optional[StoreConfig]) -> None:
    if split_url(src)[0] == "" and split_url(dst)[0] == "":
        parent = os.path.dirname(os.path.abspath(dst))
        os.makedirs(parent, exist_ok=True)
        try:
            os.replace(src, dst)
            return
        except OSError:
            pass  # other filesystem: copy atomically below
    with get_store(src, config).open_read(src) as f, get_store(dst, config).open_write(dst) as out:
        shutil.copyfileobj(f, out, COPY_CHUNK)
    get_store(src, config).delete(src)


def run_with_path_generator(
    res, names: Iterator[str], config: Optional[StoreConfig] = None, overwrite: bool = False
) -> List[str]:
    """Move the shards of a finished ``ConvertResult`` to the generator's names; a name
    that already exists is replaced only with ``overwrite`` (as for a string ``path``)."""
    dests: List[str] = []
    left = f"the shards are left in {os.path.dirname(res.paths[0])}" if res.paths else ""
    for _ in res.paths:
        try:
            name = next(names)
            # a name given as bytes or a path object names that file, not its repr
            dests.append(os.fsdecode(name) if isinstance(name, (bytes, os.PathLike)) else str(name))
        except StopIteration:
            raise ValueError(
                f"the path generator yielded {len(dests)} names for {len(res.paths)} shards; {left}"
            ) from None
    if len(set(dests)) != len(dests):
        raise ValueError(f"the path generator yielded a name twice: {dests}; {left}")
    existing = [d for d in dests if get_store(d, config).exists(d)]
    if existing and not overwrite:
        raise OutputExistsError(
            f"{len(existing)} name(s) the path generator yielded already exist (e.g. "
            f"{existing[0]}); pass ",
            OVERWRITE,
            f" to replace them; {left}",
        )
    for src, dst in zip(res.paths, dests):
        _move(src, dst, config)
    manifest = dict(res.manifest)
    manifest["shards"] = [dict(s, path=d) for s, d in zip(res.manifest["shards"], dests)]
    manifest["output"] = "<generator>"
    if dests:
        rejects = [
            json.loads(line)
            for line in get_store(res.rejects_path, config)
            .read_bytes(res.rejects_path)
            .decode()
            .splitlines()
            if line.strip()
        ]
        manifest["rejects"] = dict(manifest["rejects"], path=companion(dests[0], ".rejects.jsonl"))
        job_manifest.write_manifest(dests[0], manifest, rejects, config)
    tmp = os.path.dirname(res.paths[0]) if res.paths else os.path.dirname(res.manifest_path)
    for leftover in (res.manifest_path, res.rejects_path):
        get_store(leftover, config).delete(leftover)
    if split_url(tmp)[0] == "" and os.path.isdir(tmp) and not os.listdir(tmp):
        os.rmdir(tmp)
    res.paths[:] = dests
    return dests
