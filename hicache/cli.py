"""hicache-lab: answer tiered-KV-cache questions by simulation, then check them on a GPU."""

from __future__ import annotations

import argparse
import importlib
import sys

from hicache.cli_common import HelpFormatter

# The CLI is the composition root. One registration point: command name -> the module
# whose add_parser(sub) defines it. Those modules import only argparse-level things at the
# top (``--help`` starts fast, and a command whose runtime is missing, simpy on a GPU box or
# torch on a planner's laptop, is still listed); the work's imports happen when it runs.
COMMANDS: dict[str, str] = {
    "run": "sim.command",
    "sweep": "sim.sweep_command",
    "replay": "hicache.replay.command",
    "calibrate": "gpu_backend.command",
    "measure": "gpu_backend.measure_command",
    "validate": "validation.command",
    "scenario": "hicache.scenario.command",
}

EPILOG = """\
examples:
  hicache-lab run scenarios/quick.yaml                  simulate L1 vs L1+L2 vs L1+L2+L3
  hicache-lab run --from-sglang "python -m sglang.launch_server --model-path ... \\
      --enable-hierarchical-cache --hicache-ratio 2"     your SGLang launch, simulated
  hicache-lab sweep scenarios/quick.yaml --grid cache.hicache_ratio=1.5,2,4 \\
      --target 'ttft_p90_s<=2' --out results/sweep      how much host memory for a target
  hicache-lab replay --trace trace.jsonl --capacity-tokens 1M,4M   hit rate per cache size
  hicache-lab scenario check scenarios/quick.yaml     validate a scenario without running it
run 'hicache-lab COMMAND --help' for a command's options."""

# Errors a user can cause and read (bad input, missing files, disks): one line, exit 2.
USER_ERRORS = (ValueError, FileNotFoundError, PermissionError, IsADirectoryError,
               NotADirectoryError)


def _unavailable(command: str, missing: str) -> int:
    print(f"hicache-lab {command}: needs the Python package {missing!r}, which is not "
          f"installed here (pip install {missing}, or bash scripts/setup.sh --test)",
          file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hicache-lab", description=__doc__, epilog=EPILOG,
                                     formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            missing = (e.name or "?").split(".")[0]
            p = sub.add_parser(command, help=f"(unavailable: needs {missing})",
                               prefix_chars="\0", add_help=False)
            p.add_argument("rest", nargs=argparse.REMAINDER)
            p.set_defaults(func=lambda _a, c=command, m=missing: _unavailable(c, m))
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # a command that keeps partial work says what it kept
        kept = getattr(args, "interrupted", "no complete-looking output was left behind")
        print(f"\nhicache-lab {args.command}: interrupted; {kept}", file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:
        missing = (e.name or "?").split(".")[0]
        if missing in ("hicache", "sim", "gpu_backend", "validation"):
            raise
        return _unavailable(args.command, missing)
    except USER_ERRORS as e:
        print(f"hicache-lab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk, a vanished folder: name the file, no traceback
        where = f" {e.filename}" if e.filename else ""
        print(f"hicache-lab {args.command}: error:{where}: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
