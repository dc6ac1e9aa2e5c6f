"""A type map next to selections (``--type-map``, ``load(..., type_map=...)``): the names a
user writes are the record's entries (``cls:int64``), but selections store what they
select under ``value`` and ``label`` (``value.<key>`` / ``label.<i>`` for dict and list
selections).  The type map is taken through the selections, so that ``cls:int64`` with
``selections: [jpg, cls]`` types the ``label`` feature; a name that no selection writes
fails before the job starts (a ValueError: exit 2 on the CLI), in one line that names the
features the selections write."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple


def _written(selections: Sequence[Any]) -> List[Tuple[str, Optional[str]]]:
    """``(feature name, entry it is made from or None)`` for every feature the
    selections write, in order."""
    from transforms.ops.leaves import NAMES, normalize_selections
    from transforms.ops.selections import SelectDict, SelectList

    out: List[Tuple[str, Optional[str]]] = []
    for name, sel in zip(NAMES, normalize_selections(selections)):
        if isinstance(sel, SelectDict):
            out.extend((f"{name}.{k}", child.ext_name) for k, child in sel.items.items())
        elif isinstance(sel, SelectList):
            out.extend((f"{name}.{i}", child.ext_name) for i, child in enumerate(sel.items))
        else:
            out.append((name, sel.ext_name))
    return out


def through_selections(type_map: Any, selections: Sequence[Any]) -> Any:
    """The type map with the entries' names replaced by the features the selections store
    them as (a ``name:type,...`` string when given one); unchanged without selections.
    Raises ValueError for a name that no selection writes, or a feature typed twice."""
    from transforms.tfrecord.schema import parse_type_map

    if not type_map or not selections:
        return type_map
    parsed = parse_type_map(type_map)
    written = _written(selections)
    features = {f for f, _ in written}
    out: Dict[str, str] = {}
    unknown: List[str] = []
    for name, typ in parsed.items():
        targets = [name] if name in features else [f for f, src in written if src == name]
        if not targets:
            unknown.append(name)
        for t in targets:
            if t in out and out[t] != typ:
                raise ValueError(f"type map types {t} twice ({out[t]} and {typ})")
            out[t] = typ
    if unknown:
        said = ", ".join(f"{f} (from {src})" if src else f for f, src in written)
        raise ValueError(
            f"type map names {', '.join(unknown)}, which the selections do not write; "
            f"they write {said}"
        )
    return ",".join(f"{n}:{t}" for n, t in out.items()) if isinstance(type_map, str) else out
