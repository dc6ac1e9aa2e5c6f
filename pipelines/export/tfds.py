"""TensorFlow Datasets metadata for a finished job (``--tfds``, ``load(..., tfds=True)``).

A job that writes ``DIR/<split>.tfrecord`` (or ``DIR/<split>.array_record``) leaves shards
``<split>-00000-of-0000N.tfrecord``
(``pipelines.job.names.shard_names``).  This module writes TFDS's ``dataset_info.json`` and
``features.json`` into ``DIR``, so that ``tfds.builder_from_directory(DIR)`` reads the split:
its split info carries tar2tf's file-name template (:data:`FILE_TEMPLATE`) and the record
count of every shard from the manifest, and its features are typed from the manifest's
schema (:mod:`pipelines.export.tfds_features`; the mapping and its reasons are in
docs/tfds.md).

A second job writing another split into the same directory adds it: the update reads the
metadata there, checks that the features agree, and rewrites it with both splits, under an
exclusive ``fcntl`` lock on a file in ``DIR`` (released by the kernel if the job dies, so a
crash leaves no stale lock).  Each file is written under a temporary name and renamed,
``dataset_info.json`` last: a reader sees the old metadata or the new, never a mix.  Local
directories only: object stores offer no such lock (:func:`check_output` says so before the
job runs).

A job that replaces a split's shards (with ``--tfds`` or without) first takes the split out
of the metadata (:func:`retracted`, from the job's start in
``pipelines.job.kinds.tfrecord.kind``), so that metadata never names shards or counts that
are not on disk, whatever becomes of the job; a ``--tfds`` job that succeeds writes it again.

TensorFlow and TFDS are imported only when metadata is written (here and in
:func:`~pipelines.export.tfds_features.to_tfds`): ``--tfds`` is optional, and a job
without it never pays their import.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from pipelines.export.tfds_features import TfdsError, feature_specs, nest, parse_image, to_tfds
from pipelines.job import names
from transforms.stores import split_url
from transforms.stores.exclusive import flocked
from transforms.tfrecord.schema import BYTES, parse_type_map

log = logging.getLogger("tar2tf")

#: output suffix -> TFDS file format (TFDS picks its reader by the suffix): TFRecord, read by
#: ``as_dataset``, or ArrayRecord (``--format array_record``), read by ``as_data_source``
FILE_FORMATS = {"tfrecord": "tfrecord", "array_record": "array_record"}
#: tar2tf's shard names (train-00000-of-00004.tfrecord) in TFDS's template language
FILE_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"
_FORMAT_NAMES = {"tfrecord": "TFRecord", "array_record": "ArrayRecord"}
LOCK_NAME = ".tar2tf-tfds.lock"
INFO_NAME, FEATURES_NAME = "dataset_info.json", "features.json"
DEFAULT_VERSION = "1.0.0"
# a TFDS split name ((\w|-)+ in its file-name regex), ASCII so that it is also a valid part
# of a split expression such as "train[:10%]"; "all" is TFDS's name for every split together
_SPLIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


def _local(output: str) -> str:
    return split_url(output)[2]


def check_output(
    output: Any,
    image: Union[None, str, Sequence[str]] = None,
    type_map: Union[None, str, Mapping[str, str]] = None,
) -> str:
    """The split name of an output TFDS can load, or :class:`TfdsError` (before the job runs)."""
    if isinstance(output, os.PathLike):
        output = os.fspath(output)
    if not isinstance(output, str):
        raise TfdsError(
            "tfds needs the output as one file name such as out/train.tfrecord, "
            f"not {type(output).__name__}"
        )
    scheme = split_url(output)[0]
    if scheme:
        raise TfdsError(
            f"--tfds writes its metadata to a local directory only, not to {scheme}:// "
            "(the update of a split needs a lock that object stores do not offer); "
            "convert to a local directory and copy it"
        )
    name = os.path.basename(_local(output))
    stem, dot, suffix = name.rpartition(".")
    if names.is_template(name) or not dot or suffix not in FILE_FORMATS:
        raise TfdsError(
            f"--tfds needs an output named <split>.tfrecord (or <split>.array_record), whose "
            f"shards <split>-00000-of-0000N.tfrecord TFDS reads, not {name!r}"
        )
    if not _SPLIT.match(stem) or stem == "all":
        raise TfdsError(
            f"--tfds: {stem!r} cannot be a TFDS split name (letters, digits, '_' and '-', "
            "starting with a letter or digit; not 'all')"
        )
    images = parse_image(image)
    types = parse_type_map(type_map)
    for n in images:
        if types.get(n, BYTES) != BYTES:
            raise TfdsError(f"--tfds-image {n}: --type-map types it {types[n]}, not bytes")
    if importlib.util.find_spec("tensorflow_datasets") is None:
        raise TfdsError("--tfds needs the tensorflow-datasets package: pip install 'tar2tf[tfds]'")
    return stem


def identity(directory: str) -> Tuple[str, str]:
    """``(name, version)`` for a dataset directory: TFDS's own layout ``<name>/<version>``
    when the directory is named as a version, else its name and :data:`DEFAULT_VERSION`."""
    from tensorflow_datasets.core.utils.version import Version

    base = os.path.basename(directory)
    version = DEFAULT_VERSION
    if Version.is_valid(base):
        version, base = base, os.path.basename(os.path.dirname(directory))
    name = re.sub(r"\W", "_", base.lower(), flags=re.ASCII)
    if not re.match(r"[a-z]", name):  # TFDS names start with a letter
        name = "tar2tf_" + name
    return name, version


def locked(directory: str):
    """An exclusive lock on ``directory``'s TFDS metadata (a context), held by this process
    for the block."""
    return flocked(os.path.join(directory, LOCK_NAME), create=True)


def _check_shards(output: str, split: str, shards: Sequence[Mapping[str, Any]]) -> None:
    suffix = output.rpartition(".")[2]
    n = len(shards)
    if not n:
        raise TfdsError("--tfds: the job wrote no shards, so there is no split to describe")
    want = [f"{split}-{i:05d}-of-{n:05d}.{suffix}" for i in range(n)]
    got = [os.path.basename(_local(s["path"])) for s in shards]
    if got != want:
        raise TfdsError(
            f"--tfds: shard names {got[0]!r}... do not follow {FILE_TEMPLATE} (expected {want[0]!r})"
        )


def split_of(output: Any) -> Tuple[str, str]:
    """``(directory, split)`` of a local output TFDS could describe (``DIR/<split>.tfrecord``
    or ``.array_record``), else ``("", "")``."""
    if not isinstance(output, str) or split_url(output)[0]:
        return "", ""
    name = os.path.basename(output)
    stem, dot, suffix = name.rpartition(".")
    if "{}" in name or not dot or suffix not in FILE_FORMATS or not _SPLIT.match(stem):
        return "", ""
    return os.path.dirname(output) or ".", stem


def _retractable(info_path: str, split: str, fmt: str) -> Optional[Dict[str, Any]]:
    """The metadata at ``info_path`` without ``split``, when it describes ``split`` in a
    format that may be ``fmt`` (its file format or an alternative); else None."""
    if not os.path.lexists(info_path):
        return None
    try:
        # read as the metadata's merge reads it: a link to a device is no metadata
        info = _json_file(info_path)
        splits = info.get("splits", [])
        formats = {info.get("fileFormat") or "tfrecord", *info.get("alternativeFileFormats", [])}
        kept = [s for s in splits if s.get("name") != split]
    except (TfdsError, OSError, ValueError, TypeError, AttributeError) as e:
        # a file this cannot read names no shards that tar2tf could take out
        log.warning("tfds: %s is not metadata tar2tf can update (%s): left as it is", info_path, e)
        return None
    if len(kept) == len(splits) or fmt not in formats:
        return None
    return dict(info, splits=kept)


@contextlib.contextmanager
def retracted(output: Any) -> Iterator[bool]:
    """The block in which a job starts replacing the shards of ``output``
    (``DIR/<split>.tfrecord``, with ``--tfds`` or without), after the split left
    ``DIR/dataset_info.json`` where the metadata could name those shards: whatever becomes
    of the job -- rejects, a failure, a kill -- the metadata never names shards or counts
    that are not on disk.  A job that succeeds with ``--tfds`` adds the split back
    (:func:`write_metadata`); the other splits stay, and the file goes when no split is
    left.  The metadata lock is held for the block (the earlier manifest's removal), so that
    a job describing the split's other format does not read that manifest in between.  A
    split the metadata does not describe takes no lock.  No TensorFlow import: the
    metadata is JSON.  Yields whether the split was taken out."""
    directory, split = split_of(output)
    info_path = os.path.join(directory, INFO_NAME)
    if not split or not os.path.exists(info_path):
        yield False
        return
    fmt = FILE_FORMATS[output.rpartition(".")[2]]
    # renames only: a read without the lock sees a whole file
    if _retractable(info_path, split, fmt) is None:
        yield False
        return
    with locked(directory):
        info = _retractable(info_path, split, fmt)  # again: another job may have written it
        if info is not None:
            if info["splits"]:
                data = json.dumps(info, indent=2, sort_keys=True) + "\n"
                _replace_file(info_path, data.encode())
            else:
                os.unlink(info_path)
                _sync_dir(directory)
            log.info(
                "tfds: split %s left %s while its shards are replaced; a job with --tfds "
                "that succeeds describes it again",
                split,
                info_path,
            )
        yield info is not None


def _sync_dir(directory: str) -> None:
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _replace_file(path: str, data: bytes) -> None:
    """``data`` at ``path``, written under a temporary name, synced, then renamed."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tar2tf-tfds-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_dir(directory)


def _feature_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Names of the top-level features that differ between two features.json dicts."""


def _leaves(features: Mapping[str, Any], prefix: str = "") -> Dict[str, Mapping[str, Any]]:
    """A features.json dict -> feature name (``a/b`` when nested, as in the Examples) -> its
    leaf (a Tensor's or an Image's JSON)."""
    out: Dict[str, Mapping[str, Any]] = {}
    for name, f in features.get("featuresDict", {}).get("features", {}).items():
        if "featuresDict" in f:
            out.update(_leaves(f, prefix + name + "/"))
        else:
            out[prefix + name] = f
    return out


def _tensor(leaf: Mapping[str, Any]):
    """``(dtype, dims)`` of a Tensor leaf (-1: a dimension of any length), else None."""
    t = leaf.get("tensor")
    if t is None:
        return None
    return t.get("dtype"), [int(d) for d in t.get("shape", {}).get("dimensions", [])]


def _describe(leaf: Mapping[str, Any]) -> str:
    t = _tensor(leaf)
    if t is None:
        kind = leaf.get("pythonClassName", "").rpartition(".")[2] or "another feature"
        return f"an {kind}" if kind[:1] in "AEIOU" else f"a {kind}"
    dtype, dims = t
    dtype = "bytes" if dtype == "string" else dtype
    if not dims:
        return f"{dtype}, one value in every record"
    if dims == [-1]:
        return f"{dtype}, a vector of any length (or missing)"
    return f"{dtype}, {dims[0]} values in every record"


def _misfits(dataset: Mapping[str, Any], split: Mapping[str, Any]) -> List[str]:
    """Why a split whose own features are ``split`` cannot be read with the ``dataset``'s
    (features.json dicts), one phrase per feature; none when every record of the split
    parses with the dataset's features.  A split may lack a feature the dataset has as a
    variable-length vector (an optional member: TFDS reads it empty where a record lacks
    it), or hold one, or a fixed number, of the values of such a vector."""
    have, want = _leaves(dataset), _leaves(split)
    out = []
    for name in sorted(set(have) | set(want)):
        there, here = have.get(name), want.get(name)
        if there == here:
            continue
        if there is None:
            out.append(f"{name}: not a feature of the dataset")
            continue
        vector = _tensor(there)
        if vector is not None and vector[1] == [-1]:
            if here is None:
                continue  # read as an empty vector
            mine = _tensor(here)
            if mine is not None and mine[0] == vector[0] and len(mine[1]) <= 1:
                continue  # a scalar or fixed-length vector of the same type: a vector
        here_text = "missing from every record" if here is None else _describe(here)
        out.append(f"{name}: {here_text} here, {_describe(there)} there")
    return out


def _write_files(info, directory: str) -> None:
    """``info``'s files into ``directory``: each written under a temporary name, synced, then
    renamed, ``dataset_info.json`` last, so that its new splits appear with their features."""
    tmp = tempfile.mkdtemp(prefix=".tar2tf-tfds-", dir=directory)
    try:
        info.write_to_directory(tmp)
        names = sorted(os.listdir(tmp), key=lambda f: (f == INFO_NAME, f))
        for f in names:
            fd = os.open(os.path.join(tmp, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for f in names:
            os.replace(os.path.join(tmp, f), os.path.join(directory, f))
        _sync_dir(directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: the largest metadata file read back: a dataset_info.json of thousands of splits and
#: shards is well under it; a file beyond it (a link to a device, a stray dump) is no metadata
MAX_METADATA_BYTES = 64 << 20


def _json_file(path: str) -> Any:
    """The JSON in one of the metadata files, or a :class:`TfdsError` naming the file: not
    a regular file (a link to /dev/zero), larger than :data:`MAX_METADATA_BYTES`, not JSON."""
    try:
        # O_NONBLOCK: a FIFO under the name must not hold the job at the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise _damaged(path, e.strerror or str(e)) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise _damaged(path, "not a regular file")
        data = f.read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise _damaged(path, f"larger than {MAX_METADATA_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise _damaged(path, f"not JSON: {e}") from None


def _damaged(path: str, why: str) -> TfdsError:
    return TfdsError(
        f"--tfds: {path} is not TFDS metadata ({why}); its splits would be lost, so this "
        f"split was not added: restore the file, or delete {INFO_NAME} and {FEATURES_NAME} "
        "to describe this split alone"
    )


def _existing(directory: str):
    """``(DatasetInfo proto, features.json)`` of the metadata already in ``directory``,
    checked: a file that cannot be read as the metadata tar2tf writes is a
    :class:`TfdsError` naming it, never metadata written over it without its splits (an
    empty ``{}`` would otherwise be read as a dataset of no splits)."""
    from google.protobuf import json_format
    from tensorflow_datasets.core.proto import dataset_info_pb2

    info_path = os.path.join(directory, INFO_NAME)
    doc = _json_file(info_path)
    if not isinstance(doc, dict) or not isinstance(doc.get("splits"), list) or not doc["splits"]:
        raise _damaged(info_path, "it names no splits")
    try:
        old = json_format.ParseDict(doc, dataset_info_pb2.DatasetInfo())
    except (json_format.ParseError, TypeError, ValueError) as e:
        raise _damaged(info_path, " ".join(str(e).split())[:200]) from None
    if not all(p.name for p in old.splits):
        raise _damaged(info_path, "a split has no name")
    if old.file_format not in FILE_FORMATS.values():
        raise _damaged(info_path, f"file format {old.file_format!r}")
    features_path = os.path.join(directory, FEATURES_NAME)
    features = _json_file(features_path)
    if not isinstance(features, dict):
        raise _damaged(features_path, f"a JSON {type(features).__name__}, not an object")
    return old, features


def write_metadata(
    output: Any,
    manifest: Mapping[str, Any],
    image: Union[None, str, Sequence[str]] = None,
) -> Dict[str, Any]:
    """Add (or replace) the split of this job's output in its directory's TFDS metadata;
    returns ``{"path": dataset_info.json, "split": name, "examples": n, "splits": [...],
    "formats": [file format, alternatives...]}``.  A split may be in both formats (two jobs
    with the same sources and options): the dataset's format is then TFRecord, read by
    ``as_dataset``, with ArrayRecord as the alternative ``as_data_source`` reads, as long
    as every split has both."""
    if isinstance(output, os.PathLike):
        output = os.fspath(output)
    split = check_output(output, image)
    directory = os.path.abspath(os.path.dirname(_local(output)) or ".")
    shards = manifest["shards"]
    _check_shards(output, split, shards)
    flat = feature_specs(manifest["schema"], image)
    suffix = output.rpartition(".")[2]
    fmt = FILE_FORMATS[suffix]

    from google.protobuf import json_format
    from tensorflow_datasets.core import dataset_info, naming
    from tensorflow_datasets.core import splits as split_lib
    from tensorflow_datasets.core.utils.version import Version

    features = to_tfds(nest(flat))
    new_features = json_format.MessageToDict(features.to_proto())
    info_path = os.path.join(directory, INFO_NAME)
    with locked(directory):
        name, version = identity(directory)
        protos = []
        if os.path.exists(info_path):
            old, old_features = _existing(directory)
            if old_features != new_features:
                misfits = _misfits(old_features, new_features)
                if misfits:
                    raise TfdsError(
                        f"--tfds: the features of split {split!r} differ from those of the "
                        f"splits already in {directory} ({'; '.join(misfits)}); every split "
                        "of a TFDS dataset has the same features: convert this split with "
                        "the --type-map, --tfds-image and --ops selections of the others "
                        "(it may lack a feature they have as a vector), or into another "
                        "directory"
                    )
                # a compatible subset (a split without an optional member...): declared,
                # and read, with the dataset's features
                from tensorflow_datasets.core.features import FeatureConnector

                features = FeatureConnector.from_config(directory)
                log.info(
                    "--tfds: split %r is declared with the features of the splits in %s",
                    split,
                    directory,
                )
            # keep the name and version the other splits' templates were written with
            name, version = old.name or name, old.version or version
            protos = [p for p in old.splits if p.name != split]
            old_format = getattr(old.file_format, "value", old.file_format) or None
        else:
            old_format = None
        names = sorted({p.name for p in protos} | {split})
        found = _split_formats(directory, names, split, fmt, shards, manifest["schema"])
        for p in protos:  # a split whose manifests are gone: as the metadata describes it
            if p.name not in found and old_format:
                found[p.name] = {old_format: ([int(n) for n in p.shard_lengths], p.num_bytes)}
        names = sorted(found)
        primary, others = _common_formats(found, directory)
        template = naming.ShardedFileTemplate(
            data_dir=directory,
            template=FILE_TEMPLATE,
            dataset_name=name,
            filetype_suffix=primary,
        )
        protos = []
        for s in names:
            lengths, nbytes = found[s][primary]
            info_s = split_lib.SplitInfo(
                name=s,
                shard_lengths=lengths,
                num_bytes=nbytes,
                filename_template=template.replace(split=s),
            )
            protos.append(info_s.to_proto())
            if s == split:
                ours = info_s
        info = dataset_info.DatasetInfo(
            builder=dataset_info.DatasetIdentity(
                name=name, version=Version(version), data_dir=directory, module_name=""
            ),
            features=features,
            description=" and ".join(_FORMAT_NAMES[f] for f in (primary, *others))
            + " shards written by tar2tf; each split's manifest is "
            "<split>.<format>.manifest.json.",
        )
        info.set_file_format(primary)
        for f in others:  # as_data_source reads ArrayRecord where as_dataset reads TFRecord
            info.add_alternative_file_format(f)
        info.set_splits(split_lib.SplitDict.from_proto(protos, template))
        _write_files(info, directory)
    return {
        "path": info_path,
        "split": split,
        "examples": ours.num_examples,
        "splits": [p.name for p in protos],
        "formats": [primary, *others],
    }


def _split_formats(
    directory: str,
    names: Sequence[str],
    split: str,
    fmt: str,
    shards: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any],
) -> Dict[str, Dict[str, Tuple[List[int], int]]]:
    """split -> file format -> (records of each shard, bytes), for the formats each split's
    shards are in: this job's, and those whose manifest ``DIR/<split>.<format>.manifest.json``
    is there with shards TFDS can name and this job's schema (a job that wrote the same
    records in the other format)."""
    out: Dict[str, Dict[str, Tuple[List[int], int]]] = {}
    for s in names:
        for f in sorted(set(FILE_FORMATS.values())):
            if (s, f) == (split, fmt):
                rows = shards
            else:
                path = os.path.join(directory, f"{s}.{f}.manifest.json")
                try:
                    with open(path, encoding="utf-8") as fh:
                        m = json.load(fh)
                    rows = m["shards"]
                    _check_shards(os.path.join(directory, f"{s}.{f}"), s, rows)
                    if m.get("schema") != schema:
                        continue
                    for r in rows:
                        if not os.path.exists(os.path.join(directory, os.path.basename(r["path"]))):
                            raise FileNotFoundError(r["path"])
                except (OSError, ValueError, KeyError, TypeError, TfdsError):
                    continue  # not there, or not shards of this dataset
            out.setdefault(s, {})[f] = (
                [int(r["records"]) for r in rows],
                sum(int(r["bytes"]) for r in rows),
            )
    return out


def _common_formats(
    found: Mapping[str, Mapping[str, Tuple[List[int], int]]], directory: str
) -> Tuple[str, List[str]]:
    """The dataset's file format (TFRecord when every split has it: ``as_dataset`` reads
    it) and the alternative formats every split also has; a split whose formats hold
    different records, or no format every split has, is a :class:`TfdsError`."""
    for s, by in sorted(found.items()):
        if len({tuple(lengths) for lengths, _ in by.values()}) > 1:
            raise TfdsError(
                f"--tfds: split {s!r} is in {' and '.join(sorted(by))} shards that hold "
                "different records: convert both with the same sources and options"
            )
    common = set.intersection(*(set(by) for by in found.values()))
    if not common:
        have = "; ".join(f"{s}: {', '.join(sorted(by))}" for s, by in sorted(found.items()))
        raise TfdsError(
            f"--tfds: the splits in {directory} have no file format in common ({have}); "
            "TFDS reads one format (and alternatives) for every split"
        )
    primary = "tfrecord" if "tfrecord" in common else sorted(common)[0]
    return primary, sorted(common - {primary})


def summary_line(written: Mapping[str, Any], output: str) -> str:
    """What the CLI says after writing the metadata (paths as the user gave them)."""
    d = os.path.dirname(_local(output)) or "."
    formats = written.get("formats") or []
    return (
        f"tfds: {os.path.join(d, INFO_NAME)}: split {written['split']} "
        f"({written['examples']} examples); splits: {', '.join(written['splits'])}"
        + (f"; file formats: {', '.join(formats)}" if len(formats) > 1 else "")
    )
