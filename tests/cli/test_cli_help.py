"""The CLI for users: fast --help (no heavy imports), help written for users, one size
parser for every size option."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys

import pytest

from hicache.cli import COMMANDS, build_parser, main
from hicache.units import SizeError, format_size, parse_size, size_arg

HEAVY = ("numpy", "pandas", "matplotlib", "pyarrow", "simpy", "torch", "ray", "tqdm")


def heavy_imported_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after running ``code`` (its stdout,
    e.g. --help, is ignored: the answer goes to stderr)."""
    code += f"\nimport sys\nprint([m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return ast.literal_eval(out.stderr.strip().splitlines()[-1])


def test_building_every_parser_imports_nothing_heavy() -> None:
    assert heavy_imported_after("from hicache.cli import build_parser\nbuild_parser()") == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_help_imports_nothing_heavy(command: str) -> None:
    code = (f"from hicache.cli import main\n"
            f"try:\n    main([{command!r}, '--help'])\nexcept SystemExit:\n    pass")
    assert heavy_imported_after(code) == []


def _help_texts() -> dict[str, str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"": parser.format_help(), **{n: p.format_help() for n, p in sub.choices.items()}}


def test_every_command_has_help_written_for_users() -> None:
    texts = _help_texts()
    assert set(texts) == {"", *COMMANDS}
    for name, text in texts.items():
        for internal in (":func:", ":mod:", ":class:", "Invariant", "``"):
            assert internal not in text, (name, internal)
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings[0]} has no help"


def test_help_lines_fit_100_columns() -> None:
    for name, text in _help_texts().items():
        assert max(map(len, text.splitlines())) <= 100, name


@pytest.mark.parametrize("text, value", [
    ("4e6", 4_000_000), ("4M", 4_000_000), ("4000000", 4_000_000), ("512Ki", 524_288),
    ("64GiB", 64 << 30), ("1.5Ki", 1536), ("1_000", 1000), ("2k", 2000), ("1e12", 10**12),
    ("0", 0), (" 7 ", 7), ("3MB", 3_000_000),
])  # fmt: skip
def test_sizes_read_the_forms_users_type(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text, message", [
    ("-100", "must be >= 0"), ("1.5", "not a whole number"), ("inf", "not a size"),
    ("nan", "not a size"), ("4X", "not a size"), ("1e30", "too large"), ("", "not a size"),
    ("abc", "not a size"),
])  # fmt: skip
def test_bad_sizes_fail_naming_what_was_typed(text: str, message: str) -> None:
    with pytest.raises(SizeError, match=message) as e:
        parse_size(text, what="--l2-tokens")
    assert str(e.value).startswith("--l2-tokens:")


def test_size_options_share_the_parser_and_report_usage_errors(capsys) -> None:
    convert = size_arg(1)
    assert convert("4e6") == convert("4M") == 4_000_000
    with pytest.raises(argparse.ArgumentTypeError, match=">= 1"):
        convert("0")
    with pytest.raises(SystemExit) as e:
        main(["replay", "--trace", "x", "--l2-tokens", "-100"])
    assert e.value.code == 2
    assert "argument --l2-tokens: '-100' must be >= 0" in capsys.readouterr().err
    assert format_size(4_000_000) == "4M" and format_size(524_288, binary=True) == "512Ki"
