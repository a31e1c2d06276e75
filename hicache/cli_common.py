"""Arguments and steps the commands share: where a scenario comes from, where outputs go.

Kept free of heavy imports (pandas, matplotlib, simpy): ``hicache-lab CMD --help`` builds
every parser, and must start fast. :func:`load_scenario_arg` is the one place the CLI turns
what the user typed into a Scenario.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic loads with the scenario, when a command runs
    from hicache.scenario import Scenario


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
                   help="override a scenario key, e.g. --set cache.page_size=32, or one "
                        "key of the hardware profile or model preset it names: "
                        "hardware.l3.mooncake.nic_bytes_per_s=7e8 (repeatable, applied in "
                        "order; values are YAML: 32, true, null, [1, 2])")


def add_output_args(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help=f"output folder (default: {default}); must not exist or be empty")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing output folder of a previous run")


def load_scenario_arg(scenario: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """The scenario a command runs, from a path or a bundled name (``quick``), with the
    ``--set`` overrides applied and everything validated: the one place the CLI turns a
    SCENARIO argument into a :class:`hicache.scenario.Scenario`."""
    from hicache.scenario import load_scenario

    return load_scenario(scenario, overrides)


def scenario_source(args: argparse.Namespace) -> str:
    """How errors and manifests name where the scenario came from."""
    return str(args.scenario) if args.scenario is not None else "<--from-sglang>"
