"""Unreadable ``--ops`` specs are usage errors (exit 2, one line), however they fail to
parse: YAML or mappings nested deeper than the parsers go, call expressions nested too
deeply, a ``module:function`` that is no ops function (``os:system``); and the line quotes
at most a short cut of a multi-KB spec."""

import pytest
from support.cli_fixtures import cli

from launch.opsspec import MAX_MESSAGE, SpecError, load_ops

DEEP_YAML = "[" * 20000 + "]" * 20000
DEEP_MAPPING = "{a: " * 3000 + "1" + "}" * 3000
DEEP_SELECTION = "{selections: [" + "{a: " * 3000 + "b" + "}" * 3000 + "]}"
DEEP_CALL = '["' + "Decode(" * 5000 + "jpg" + ")" * 5000 + '"]'
LONG_BAD = '["Decode(jpg, ' + "x" * 8000 + '"]'


@pytest.mark.parametrize(
    "spec",
    [DEEP_YAML, DEEP_MAPPING, DEEP_SELECTION, DEEP_CALL, LONG_BAD, "os:system", "os:getcwd"],
    ids=["deep-yaml", "deep-mapping", "deep-selection", "deep-call", "long", "system", "getcwd"],
)
def test_unreadable_spec_is_a_short_spec_error(spec):
    with pytest.raises(SpecError) as e:
        load_ops(spec)
    assert len(str(e.value)) <= MAX_MESSAGE + 5


def test_os_system_is_not_called():
    with pytest.raises(SpecError, match="is not an ops function: it needs arguments"):
        load_ops("os:system")


@pytest.mark.parametrize(
    "spec",
    [DEEP_YAML, DEEP_MAPPING, "os:system", LONG_BAD],
    ids=["yaml", "mapping", "system", "long"],
)
def test_cli_exit_2_one_short_line(tmp_path, spec):
    p = cli(
        "convert",
        str(tmp_path / "in.tar"),
        "--output",
        str(tmp_path / "o" / "t-{}.record"),
        "--ops",
        spec,
        "--no-progress",
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("tar2tf convert: "), p.stderr[-2000:]
    assert len(lines[0]) < 800
