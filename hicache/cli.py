"""hicache-lab: replay traces, simulate and sweep scenarios, calibrate and validate runtimes."""

from __future__ import annotations

import argparse
import importlib
import sys

# The CLI is the composition root: subcommands are found by module name, so the control
# plane never imports a runtime (simpy, torch) statically. Each module has add_parser().
# A module whose dependencies are missing (no simpy on a GPU box, no torch on a planner's
# laptop) still gets its commands listed; running one says what to install.
COMMANDS: dict[str, tuple[str, ...]] = {
    "hicache.replay.command": ("replay",),
    "sim.command": ("run",),
    "sim.sweep": ("sweep",),
    "gpu_backend.command": ("calibrate", "measure"),
    "validation.command": ("validate",),
}


def _unavailable(command: str, missing: str) -> argparse.ArgumentParser:
    def fail(args: argparse.Namespace) -> int:
        print(f"hicache-lab {command}: needs the Python package {missing!r}, which is not "
              f"installed here (pip install {missing}, or bash scripts/setup.sh --test)",
              file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(add_help=False)
    p.set_defaults(func=fail)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hicache-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, commands in COMMANDS.items():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            missing = (e.name or "?").split(".")[0]
            for command in commands:
                p = sub.add_parser(command, help=f"(unavailable: needs {missing})",
                                   prefix_chars="\0", add_help=False)
                p.add_argument("rest", nargs=argparse.REMAINDER)
                p.set_defaults(func=_unavailable(command, missing).get_default("func"))
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
