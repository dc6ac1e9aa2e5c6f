"""Source resolution: brace templates, globs, the local store's atomic writes, the AIS
endpoint's default scheme."""

import os

import pytest

from transforms.stores import LocalStore
from transforms.tar.sources import expand_braces, resolve


def test_brace_expansion_order():
    assert expand_braces("t-{0..2}.tar") == ["t-0.tar", "t-1.tar", "t-2.tar"]
    assert expand_braces("t-{000..010..5}.tar") == ["t-000.tar", "t-005.tar", "t-010.tar"]
    assert expand_braces("{b,a}-{1..2}") == ["b-1", "b-2", "a-1", "a-2"]


def test_resolve_local(tmp_path):
    for n in ("t-1.tar", "t-2.tar", "t-3.tar", "u-1.tgz", "sub/t-9.tar"):
        (tmp_path / n).parent.mkdir(exist_ok=True)
        (tmp_path / n).write_bytes(b"x")
    urls, rej = resolve(["t-{3,1}.tar", "t-{4..4}.tar", "u-*.tgz"], base=str(tmp_path))
    assert urls == [str(tmp_path / "t-3.tar"), str(tmp_path / "t-1.tar"), str(tmp_path / "u-1.tgz")]
    assert [(r.stage, r.key, r.counts_record) for r in rej] == [("list", None, False)]
    assert "t-4.tar" in rej[0].reason
    urls, rej = resolve(str(tmp_path / "nothing-*.tar"))
    assert urls == [] and len(rej) == 1
    # * stays within a path segment (as in a shell, gsutil, Beam); ** crosses them
    (tmp_path / "sub" / "deeper").mkdir()
    (tmp_path / "sub" / "deeper" / "t-8.tar").write_bytes(b"x")
    assert resolve("*.tar", base=str(tmp_path))[0] == [
        str(tmp_path / f"t-{i}.tar") for i in (1, 2, 3)
    ]
    assert resolve("sub/*.tar", base=str(tmp_path))[0] == [str(tmp_path / "sub" / "t-9.tar")]
    assert resolve("sub/**.tar", base=str(tmp_path))[0] == [
        str(tmp_path / "sub" / "deeper" / "t-8.tar"),
        str(tmp_path / "sub" / "t-9.tar"),
    ]


def test_local_store_atomic_write(tmp_path):
    store = LocalStore()
    target = str(tmp_path / "d" / "f.bin")
    with pytest.raises(RuntimeError):
        with store.open_write(target) as f:
            f.write(b"partial")
            raise RuntimeError("killed")
    assert not os.path.exists(target) and os.listdir(tmp_path / "d") == []
    with store.open_write(target) as f:
        f.write(b"whole")
    assert open(target, "rb").read() == b"whole"
    assert list(store.list(str(tmp_path / "d" / "f"))) == [target]


def test_ais_endpoint_without_scheme_is_http(monkeypatch):
    from transforms.stores.base import StoreConfig

    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    assert (
        StoreConfig(ais_endpoint="127.0.0.1:51080/").resolved_ais_endpoint()
        == "http://127.0.0.1:51080"
    )
    assert (
        StoreConfig(ais_endpoint="https://ais.example:443").resolved_ais_endpoint()
        == "https://ais.example:443"
    )
    monkeypatch.setenv("AIS_ENDPOINT", "localhost:8080")
    assert StoreConfig().resolved_ais_endpoint() == "http://localhost:8080"
