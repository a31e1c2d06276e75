"""Simulator speed: simulated requests per CPU-second per scenario variant (issue 9).

    python benchmarks/sim_speed.py [--json] [--case NAME ...] [--trace FILE] [--scaling]
    python benchmarks/sim_speed.py --quick          # scenarios/quick.yaml only

One row (with ``--json``: one JSON object per line) per (scenario, variant): ``requests``,
``simulated_s``, ``wall_s``, ``cpu_s`` (``time.process_time`` of this process: the honest
figure on a shared machine; it includes collecting the run's cyclic garbage after it, and
not what earlier cases left), ``events`` (SimPy events scheduled), ``req_per_cpu_s`` and
``simpy_timeouts_per_cpu_s``, a raw SimPy loop timed in the same process just before the
case, so figures compare across machines. Cases (targets from issue 9, CPU time):

- ``multiturn_tiers``: 64 clients x 40 rounds, layer-wise loads; >= 1,000 req/CPU-s per
  variant, the three variants under 8 s;
- ``mooncake_trace``: the full 12,031-request conversation trace on 4 replicas;
  >= 1,000 req/CPU-s per variant, the three variants under 40 s;
- ``long_context``: 32k-token prompts with per-layer loads (no target; watched).

``--scaling`` adds cost per request (CPU ms) at 10/20/40 rounds and 500/2,000/12,031 trace
requests (target: flat within 20%), split two ways: into the modelled engine's batches per
request (compute batches, folded decode steps included, and cache-only plans: longer
conversations make prefill and loads longer, so fewer requests decode at once and each
takes more, smaller decode batches) and CPU per batch (the simulator's cost); and into
events per request (a request that loads its prefix layer by layer from L2 or L3 takes more
events than one that hits L1) and CPU per event. ``--replay`` times the CLI replay of the
trace at one capacity, start-up included (target: under 2 s), measured as a child process.

The trace resolves as the bundled ``mooncake_trace`` scenario resolves it (beside the
repository: ``shared/traces/mooncake/``); ``--trace FILE`` names it elsewhere. Without
it the trace cases are skipped with a message. Results also go to
``results/bench_sim_speed.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import simpy

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from hicache.scenario import load_scenario  # noqa: E402
from sim.driver import simulate  # noqa: E402

TRACE_SETTING = "../../shared/traces/mooncake/mooncake_conversation_trace.jsonl"
FULL_TRACE = 12_031
# (name, scenario, --set items); trace cases get workload.path and max_requests added
CASES = {
    "multiturn_tiers": ("scenarios/multiturn_tiers.yaml",
                        ["workload.num_rounds=40", "run.layerwise=true"]),
    "mooncake_trace": ("scenarios/mooncake_trace.yaml",
                       [f"workload.max_requests={FULL_TRACE}", "run.layerwise=true"]),
    "long_context": ("scenarios/long_context.yaml", []),
}
TARGETS = {"multiturn_tiers": 8.0, "mooncake_trace": 40.0}  # CPU s for all three variants
MIN_RATE = 1000.0  # simulated requests per CPU-second, every variant of the targeted cases


def simpy_timeouts_per_cpu_s(n: int = 200_000) -> float:
    """A raw SimPy loop: one process yielding ``n`` timeouts (the machine's yardstick)."""
    env = simpy.Environment()

    def proc():  # noqa: ANN202
        for _ in range(n):
            yield env.timeout(1.0)

    env.process(proc())
    t0 = time.process_time()
    env.run()
    return n / (time.process_time() - t0)


def default_trace() -> Path:
    return (ROOT / "scenarios" / TRACE_SETTING).resolve()


def run_case(label: str, path: str, sets: list[str], variants: list[str] | None = None
             ) -> list[dict]:
    """Simulate every variant of one scenario; one row each."""
    sc = load_scenario(ROOT / path, sets)
    rows = []
    for name, vsc in sc.expand():
        if variants and name not in variants:
            continue
        yard = simpy_timeouts_per_cpu_s()
        gc.collect()  # what earlier cases left to collect is not this case's cost
        w0, c0 = time.perf_counter(), time.process_time()
        res = simulate(vsc, name=name, progress=False)
        if res.unfinished:
            raise SystemExit(f"{label}/{name}: {len(res.unfinished)} requests unfinished")
        row = {"scenario": label, "variant": name, "requests": res.requests,
               "simulated_s": round(res.sim_time, 2), "events": res.events,
               "batches": res.batches}
        del res
        gc.collect()  # a run's objects form cycles (SimPy processes, the tree): freeing
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0  # them is its cost
        rows.append({**row, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                     "req_per_cpu_s": round(row["requests"] / cpu, 1),
                     "simpy_timeouts_per_cpu_s": round(yard)})
    return rows


def scaling_rows(trace: Path | None) -> list[dict]:
    """CPU ms per request as conversations lengthen and the trace grows (L1+L2+L3)."""
    out = []
    for rounds in (10, 20, 40):
        for r in run_case("multiturn_tiers", CASES["multiturn_tiers"][0],
                          [f"workload.num_rounds={rounds}", "run.layerwise=true"],
                          ["L1+L2+L3"]):
            out.append({**r, "scenario": f"multiturn_tiers rounds={rounds}"})
    if trace is not None:
        for n in (500, 2000, FULL_TRACE):
            for r in run_case("mooncake_trace", CASES["mooncake_trace"][0],
                              [f"workload.path={trace}", f"workload.max_requests={n}",
                               "run.layerwise=true"], ["L1+L2+L3"]):
                out.append({**r, "scenario": f"mooncake_trace requests={n}"})
    for r in out:  # what grows: the modelled engine's work per request, or the simulator's
        r["cpu_ms_per_request"] = round(1000 * r["cpu_s"] / r["requests"], 3)
        r["batches_per_request"] = round(r["batches"] / r["requests"], 2)
        r["cpu_us_per_batch"] = round(1e6 * r["cpu_s"] / r["batches"], 1)
        r["events_per_request"] = round(r["events"] / r["requests"], 1)
        r["cpu_us_per_event"] = round(1e6 * r["cpu_s"] / r["events"], 2)
    return out


def replay_row(trace: Path, capacity: str = "4e6") -> dict:
    """``hicache-lab replay`` of the trace at one capacity, as a child process."""
    cmd = [sys.executable, "-m", "hicache.cli", "replay", "--trace", str(trace),
           "--format", "mooncake", "--capacity-tokens", capacity, "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"scenario": f"replay capacity={capacity}", "variant": "cli", "requests": FULL_TRACE,
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "target_s": 2.0}


def print_table(rows: list[dict]) -> None:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols))


def verdicts(rows: list[dict]) -> list[str]:
    """The targets each targeted case meets or misses."""
    lines = []
    for case, limit in TARGETS.items():
        mine = [r for r in rows if r["scenario"] == case]
        if not mine:
            continue
        total = sum(r["cpu_s"] for r in mine)
        slowest = min(r["req_per_cpu_s"] for r in mine)
        lines.append(f"{case}: {total:.1f} CPU s for {len(mine)} variants (target < {limit:g}); "
                     f"slowest variant {slowest:.0f} req/CPU-s (target >= {MIN_RATE:g})")
    for family in ("multiturn_tiers rounds=", "mooncake_trace requests="):
        mine = [r for r in rows if r["scenario"].startswith(family)]
        if len(mine) < 2:
            continue
        grow = {k: mine[-1][k] / mine[0][k]
                for k in ("cpu_ms_per_request", "batches_per_request", "cpu_us_per_batch",
                          "events_per_request", "cpu_us_per_event")}
        sizes = "/".join(r["scenario"][len(family):] for r in mine)
        lines.append(f"{family[:-1]} {sizes}: cost per request x{grow['cpu_ms_per_request']:.2f} "
                     f"(target within 1.2) = engine batches per request "
                     f"x{grow['batches_per_request']:.2f} (the modelled engine's work) "
                     f"x CPU per batch x{grow['cpu_us_per_batch']:.2f} (the simulator's); "
                     f"events per request x{grow['events_per_request']:.2f}, "
                     f"CPU per event x{grow['cpu_us_per_event']:.2f}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--quick", action="store_true", help="scenarios/quick.yaml only")
    ap.add_argument("--case", action="append", choices=sorted(CASES), default=None,
                    help="run only this case (repeatable)")
    ap.add_argument("--trace", type=Path, default=None,
                    help="the Mooncake conversation trace (default: beside the repository)")
    ap.add_argument("--scaling", action="store_true",
                    help="also cost per request vs rounds and vs trace length")
    ap.add_argument("--replay", action="store_true",
                    help="also time the CLI replay of the trace at one capacity")
    args = ap.parse_args()
    trace = (args.trace or default_trace()).resolve()
    if not trace.exists():
        print(f"skipping the trace cases: {trace} not found (scenarios/traces/index.yaml "
              "says where to download it; --trace FILE names it)", file=sys.stderr)
        trace = None
    if args.quick:
        cases = {"quick": ("scenarios/quick.yaml", [])}
    else:
        cases = {k: CASES[k] for k in (args.case or CASES)}
    rows: list[dict] = []
    for label, (path, sets) in cases.items():
        if label == "mooncake_trace":
            if trace is None:
                continue
            sets = [*sets, f"workload.path={trace}"]
        rows.extend(run_case(label, path, sets))
    if args.scaling:
        rows.extend(scaling_rows(trace))
    if args.replay and trace is not None:
        rows.append(replay_row(trace))
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print_table(rows)
        for line in verdicts(rows):
            print(line)
    out = ROOT / "results" / "bench_sim_speed.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
