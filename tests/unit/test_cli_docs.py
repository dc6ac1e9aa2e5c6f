"""docs/cli.md and the CLI's own ``--help`` agree: every flag of every subcommand is
documented in that subcommand's section of docs/cli.md (the store flags of ``pcr``,
``verify`` and ``inspect`` in ``convert``'s, which those sections point to), every flag
the docs name exists, and the help strings name every store a path may be in."""

from __future__ import annotations

import os
import re

import pytest

from launch.cli import build_parser
from launch.store_args import add_store_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GLOBAL = {"-h", "--help", "--debug"}  # every subcommand's; said at the top of docs/cli.md


def _docs() -> str:
    with open(os.path.join(ROOT, "docs", "cli.md")) as f:
        return f.read()


def _section(sub: str) -> str:
    m = re.search(rf"^## `tar2tf {re.escape(sub)}`\n(.*?)(?=^## )", _docs(), re.S | re.M)
    assert m, f"docs/cli.md has no section for tar2tf {sub}"
    return m.group(1)


def _store_flags() -> set:
    import argparse

    p = argparse.ArgumentParser()
    add_store_args(p)
    return {s for s in p._option_string_actions if s.startswith("--")} - GLOBAL


def _flags(sub: str) -> set:
    p = build_parser().subcommands[sub]
    return {s for s in p._option_string_actions if s not in GLOBAL}


SUBS = sorted(build_parser().subcommands)


@pytest.mark.parametrize("sub", SUBS)
def test_every_flag_is_documented(sub):
    section = _section(sub.replace("_", "-"))
    named = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", section))
    missing = _flags(sub) - named
    if sub != "convert":
        # "object-store flags | as for convert": documented there
        assert re.search(r"store\s+flags", section) or not (_flags(sub) & _store_flags()), sub
        missing -= _store_flags()
    assert not missing, f"docs/cli.md, tar2tf {sub}: not documented: {sorted(missing)}"


@pytest.mark.parametrize("sub", SUBS)
def test_every_documented_flag_exists(sub):
    """The flags the section's tables (first column) and "Flags:" sentences name; its
    prose also quotes Beam's options and a misspelt flag on purpose."""
    section = _section(sub.replace("_", "-"))
    cells = re.findall(r"^\| *`(--?[a-zA-Z][\w-]*)", section, re.M)
    cells += [
        f
        for m in re.finditer(r"Flags: (.*?)(?:\n\n|\. [A-Z])", section, re.S)
        for f in re.findall(r"(?<!not )`(--?[a-zA-Z][\w-]*)", m.group(1))
    ]
    assert cells, sub
    extra = set(cells) - _flags(sub) - GLOBAL
    assert extra == set(), sorted(extra)


def test_store_flags_documented_for_convert():
    assert _store_flags() <= set(re.findall(r"`(--[\w-]+)", _section("convert")))


def test_help_strings_name_every_store():
    parser = build_parser()
    assert all(s in parser.description for s in ("s3://", "https://", "gs://", "ais://"))
    conv = parser.subcommands["convert"]._option_string_actions
    for flag in ("--output", "--base"):
        assert "s3://" in conv[flag].help, flag
    assert "s3://" in conv["--base"].help and "https://" in conv["--base"].help
    srcs = next(a for a in parser.subcommands["convert"]._actions if a.dest == "sources")
    assert "s3://" in srcs.help and "https://" in srcs.help
    pcr = parser.subcommands["pcr"]
    assert "s3://" in pcr._option_string_actions["--base"].help
    assert "s3://" in pcr.description and "https://" in pcr.description
    inspect = next(a for a in parser.subcommands["inspect"]._actions if a.dest == "shard")
    assert "s3://" in inspect.help


def _h2(path: str, title: str) -> str:
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    assert f"\n## {title}\n" in text, f"{path} has no section {title!r}"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_exit_code_table_is_launch_job_exit_meanings():
    """docs/cli.md's table of exit codes is launch/job_exit.py's, row for row, and
    ``tar2tf --help`` prints every code of it."""
    from launch.job_exit import MEANINGS

    rows = re.findall(r"^\| (\d+) \| (.+) \|$", _h2("docs/cli.md", "Exit codes"), re.M)
    assert [(int(c), m) for c, m in rows] == list(MEANINGS)
    epilog = build_parser().epilog
    for code, _ in MEANINGS:
        assert re.search(rf"^  {code}  \S", epilog, re.M), code


def test_no_other_page_has_an_exit_code_table():
    """One table: the README and the other pages link to it instead of copying it."""
    pages = ["README.md"] + [
        os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md")
    ]
    for page in pages:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        if page != os.path.join("docs", "cli.md"):
            assert not re.search(r"^\| *(exit )?code *\|", text, re.M | re.I), page
    with open(os.path.join(ROOT, "README.md")) as f:
        assert "docs/cli.md#exit-codes" in f.read()


def _env_vars_read_by_the_code() -> set:
    found = set()
    for top in ("launch", "pipelines", "transforms"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".py", ".sh")):
                    with open(os.path.join(d, name), errors="replace") as f:
                        found |= set(re.findall(r"\bTAR2TF_[A-Z0-9_]*[A-Z0-9]", f.read()))
    return found


def test_every_environment_variable_is_in_the_table():
    """Every ``TAR2TF_*`` name the code reads or sets is in docs/cli.md's
    "Environment variables", and every one named there is still in the code."""
    code = _env_vars_read_by_the_code()
    assert {"TAR2TF_IMAGE_CODEC", "TAR2TF_CACHE", "TAR2TF_SPOOL_LIMIT"} <= code
    documented = set(
        re.findall(r"\bTAR2TF_[A-Z0-9_]*[A-Z0-9]", _h2("docs/cli.md", "Environment variables"))
    )
    assert code - documented == set(), "not documented"
    assert documented - code == set(), "documented, but no code reads them"
