"""transforms.ops.leaves: the selection stage's entries equal the numpy leaves' plain values,
and selecting bytes and integer labels never imports numpy (a shard worker's start-up)."""

import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.scripts import run_python

from transforms.ops.base import OpError
from transforms.ops.leaves import SelectionStage, entry_value, flatten, leaf, structured
from transforms.ops.selections import SelectDict, SelectList

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _via_numpy(v):
    """What the stage stored before its numpy-free path: flatten(leaf(v))."""
    [(_, out)] = flatten("value", leaf(v))
    return out


def _outcome(fn, v):
    try:
        return "ok", fn(v)
    except Exception as e:  # the same failure, whichever path
        return "error", type(e)


def _same(a, b):
    assert a[0] == b[0], (a, b)
    if a[0] == "error" or not isinstance(a[1], np.ndarray):
        assert type(a[1]) is type(b[1]) and a[1] == b[1], (a, b)
    else:
        assert a[1].dtype == b[1].dtype and a[1].tolist() == b[1].tolist()


int_text = st.builds(
    lambda ws, n, ws2: (ws + str(n) + ws2).encode(),
    st.sampled_from(["", " ", "\n"]),
    st.integers(-(2**70), 2**70),
    st.sampled_from(["", "\n", " \t"]),
)
values = st.one_of(
    st.binary(max_size=40),
    int_text,
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=8),
    st.none(),
    st.lists(st.integers(-(2**40), 2**40), max_size=4),
    st.lists(st.floats(-1e6, 1e6), max_size=3),
    st.lists(st.text(max_size=3), min_size=1, max_size=3),
    st.builds(bytearray, st.binary(max_size=8)),
    st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)),
    st.builds(np.float32, st.floats(-1e6, 1e6)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@settings(max_examples=400, deadline=None)
@given(values)
@example(b"3\n")
@example(b" -2147483649 ")
@example(2**63)
@example(-(2**63))
@example(True)
@example(0.1)
@example(b"12345678901234567890123456789012")  # 32 digits: a payload, not a label
@example(b"12345678901234567890")  # 20 digits: no int64, stays bytes
@example(b"-9223372036854775808")
@example([])
def test_entry_value_is_the_numpy_leaf_as_a_plain_value(v):
    _same(_outcome(entry_value, v), _outcome(_via_numpy, v))


def test_structured_selections_flatten_into_named_entries():
    stage = SelectionStage([SelectDict({"img": "jpg", "meta": SelectList(["a", "b"])}), "cls"])
    rec = {"__key__": "k", "jpg": b"\xff" * 40, "a": b"7", "b": [1.5, 2], "cls": b" 12\n"}
    out = stage(rec)
    assert out.keys() == {
        "__key__",
        "__shard__",
        "value.img",
        "value.meta.0",
        "value.meta.1",
        "label",
    }
    assert (
        out["value.img"] == rec["jpg"]
        and out["value.meta.0"] == 7
        and type(out["value.meta.0"]) is int
    )
    assert out["value.meta.1"].dtype == np.float32 and out["value.meta.1"].tolist() == [1.5, 2.0]
    assert out["label"] == 12 and type(out["label"]) is int
    assert structured(stage.sels[0], {"img": b"x", "meta": (b"1", b"y")})["meta"] == (
        np.int32(1),
        b"y",
    )
    with pytest.raises(OpError, match="None"):
        SelectionStage(["jpg", "missing_ok"])({"__key__": "k", "jpg": b"x", "missing_ok": None})


def test_selecting_bytes_and_labels_does_not_import_numpy():
    code = (
        "import pickle, sys; from transforms.ops.leaves import selection_stage; "
        "blob = pickle.dumps(selection_stage(['jpg', 'cls'])); "
        "assert 'numpy' not in sys.modules; stage = pickle.loads(blob); "
        "out = stage({'__key__': 'a/1', 'jpg': bytes(range(64)), 'cls': b'3\\n'}); "
        "out2 = stage({'__key__': 'a/2', 'jpg': b'tiny', 'cls': 'name'}); "
        "assert 'numpy' not in sys.modules, 'numpy imported'; "
        "assert out['value'] == bytes(range(64)) and out['label'] == 3 and out2['label'] == b'name'; "
        "stage({'__key__': 'a/3', 'jpg': b'x', 'cls': [1, 2]}); "
        "assert 'numpy' in sys.modules; print('ok')"
    )
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
