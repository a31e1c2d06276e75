"""``--from-sglang`` and its companions on ``hicache-lab run`` (arguments only; the
scenario is built by :mod:`sim.from_sglang`, which knows the model's byte counts)."""

from __future__ import annotations

import argparse

from hicache.units import size_arg


def add_sglang_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "SGLang in", "simulate your own SGLang server: its cache and scheduler flags\n"
        "become the scenario; SCENARIO, if given, supplies workload and hardware")
    g.add_argument("--from-sglang", metavar="COMMAND|FILE", default=None,
                   help="an SGLang launch command in quotes, or a file holding one, a JSON/"
                        "YAML server_args dump or the ServerArgs(...) line SGLang logs")
    g.add_argument("--model-config", metavar="CONFIG_JSON", default=None,
                   help="the model's Hugging Face config.json (or its folder); needed when "
                        "--model-path is neither a local folder nor a known preset")
    g.add_argument("--hardware", metavar="NAME|FILE", default=None,
                   help="hardware profile (default: the scenario's, else h100-sxm); "
                        "--set hardware.KEY=VALUE changes one of its keys")
    g.add_argument("--gpu-memory", type=size_arg(1), default=None, metavar="BYTES",
                   help="GPU memory for --mem-fraction-static, e.g. 80GiB (default: the "
                        "hardware profile's gpu.memory_bytes)")
