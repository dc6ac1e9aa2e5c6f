"""The generated ``*_pb2.py`` modules we ship must be what protoc makes of their ``.proto``."""

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def assert_gencode_fresh(proto: str, tmp_path) -> None:
    """Regenerate ``proto`` (a repo-relative path) with grpcio-tools' protoc and compare."""
    generated = proto[: -len(".proto")] + "_pb2.py"
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip(f"grpcio-tools not installed: cannot regenerate {generated} to compare")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}", proto],
        cwd=ROOT,
        check=True,
    )
    fresh = (tmp_path / generated).read_text()
    shipped = open(os.path.join(ROOT, generated)).read()
    assert fresh == shipped, f"{generated} is stale: regenerate it (the command is in {proto})"
