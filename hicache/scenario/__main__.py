"""``python -m hicache.scenario [FILE]``: print (or write) the scenario JSON Schema.
``python -m hicache.scenario resolve SCENARIO OUT [--set KEY=VALUE ...]``: validate a
scenario and write it resolved (:mod:`hicache.scenario.resolved`), for a machine without
pydantic.

The committed schema is ``docs/scenario.schema.json`` (a test keeps it current); point an
editor's YAML language server at it for completion and checks while writing scenarios.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hicache.scenario.load import load_scenario
from hicache.scenario.overrides import ScenarioError
from hicache.scenario.resolved import write_resolved
from hicache.scenario.validate import json_schema_text


def resolve(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m hicache.scenario resolve",
                                description="Validate a scenario and write it resolved.")
    p.add_argument("scenario", help="a scenario YAML file or a bundled scenario's name")
    p.add_argument("out", type=Path, help="the JSON file to write")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    args = p.parse_args(argv)
    try:
        sc = load_scenario(args.scenario, args.overrides)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(write_resolved(sc, args.out))
    return 0


def main(argv: Sequence[str]) -> int:
    """The module doc's two commands; ``-h``/``--help`` prints it. A first argument that
    looks like an option is refused rather than taken as the file to write."""
    if argv[:1] == ["resolve"]:
        return resolve(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if argv and argv[0].startswith("-"):
        print(f"error: unknown option {argv[0]!r} (see --help)", file=sys.stderr)
        return 2
    if argv:
        Path(argv[0]).write_text(json_schema_text())
    else:
        sys.stdout.write(json_schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
