"""``hicache-lab``: replay traces, run scenarios, calibrate and validate runtimes."""

from __future__ import annotations

import argparse
import importlib
import sys

# The CLI is the composition root: subcommands are found by module name, so the control
# plane never imports a runtime (simpy, torch) statically. Each module has add_parser().
COMMANDS = (
    "hicache.replay.command",
    "sim.command",
    "gpu_backend.command",
    "validation.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hicache-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:
        print(f"hicache-lab {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
