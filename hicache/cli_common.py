"""Arguments and steps the commands share: where a scenario comes from, where outputs go.

Kept free of heavy imports (pandas, matplotlib, simpy): ``hicache-lab CMD --help`` builds
every parser, and must start fast. :func:`load_scenario_arg` is the one place the CLI turns
what the user typed into a scenario dict.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the descriptions' line breaks and examples; wraps option help."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30, width=100)


def add_scenario_args(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    p.add_argument("scenario", nargs="?" if optional else None, default=None,
                   help="a scenario YAML file, or a bundled scenario's name (quick, "
                        "multiturn_tiers, long_context, ...)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE",
                   help="override a scenario key, e.g. --set cache.page_size=32 "
                        "(repeatable; values are YAML: 32, true, null, [1, 2])")


def add_output_args(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help=f"output folder (default: {default}); must not exist or be empty")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing output folder of a previous run")


BUNDLED = Path(__file__).resolve().parents[1] / "scenarios"  # a checkout's scenarios


def find_scenario(name_or_path: str | Path) -> Path:
    """A scenario file: the path as given when it exists, else a bundled scenario by name
    (``quick`` -> ``scenarios/quick.yaml`` of this checkout), else the path as given (its
    loader then says it cannot be read)."""
    path = Path(name_or_path)
    if path.exists() or path.suffix or len(path.parts) != 1:
        return path
    bundled = BUNDLED / f"{path.name}.yaml"
    return bundled if bundled.is_file() else path


def load_scenario_arg(scenario: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The scenario a command runs, from a path or a bundled name (``--set`` overrides
    applied, validated).

    The one function that turns a SCENARIO argument into a scenario: switch it to the
    typed loader (package data) in one place."""
    from hicache.scenario import load_scenario

    return load_scenario(find_scenario(scenario), overrides)


def scenario_source(args: argparse.Namespace) -> str:
    """How errors and manifests name where the scenario came from."""
    return str(args.scenario) if args.scenario is not None else "<--from-sglang>"
