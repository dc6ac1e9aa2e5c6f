"""Whether a split's TFDS features fit the dataset's it joins, as features.json dicts:
every split of a TFDS dataset is read with the same features, so a split may join only if
each of its records parses with the dataset's; :func:`misfits` says, per feature, why not.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping


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


def misfits(dataset: Mapping[str, Any], split: Mapping[str, Any]) -> List[str]:
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
