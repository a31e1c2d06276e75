"""``python -m sim.seed_study``: run the seed study (issue 13) and write its report.

    runs (hicache-lab run)  ->  numbers (analysis)  ->  README.md + plots (report, text)
    sweeps (hicache-lab sweep) --^

Writes ``OUT/README.md``, the PNGs and ``OUT/numbers.json`` (the headline numbers the
slow test and a reviewer can diff); run folders under ``OUT/runs`` and ``OUT/sweeps``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

import pandas as pd

from hicache.report.outputs import safe_name
from sim.hardware.profile import load_profile
from sim.seed_study import discussion, runner, text
from sim.seed_study.analysis import (
    l3_evidence,
    multipliers,
    rounds_table,
    run_metrics,
    session_delta,
)
from sim.seed_study.report import render
from sim.seed_study.spec import (
    MULTITURN,
    SESSION_SEEDS,
    SESSION_VARIANTS,
    SESSIONS,
    SWEEPS,
    TIERS,
    WAIT,
    session_sets,
)

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("multiturn", "session", "sweeps")
NIC = load_profile("h200-hgx-8gpu").mooncake.nic_bytes_per_s  # the studies' node, per rank


def collect_multiturn(out: Path, reuse: bool) -> dict:
    res = {}
    for st in MULTITURN:
        folder = runner.run(st.scenario, out / "runs" / st.key, root=ROOT, reuse=reuse)
        reqs = {v: runner.requests(folder, v) for v in (*TIERS, WAIT)}
        metrics = {v: run_metrics(r) for v, r in reqs.items()}
        onset = metrics["L1+L2+L3"]["onset_round"]
        res[st.key] = {"metrics": metrics, "x": multipliers(metrics),
                       "rounds": {v: rounds_table(r) for v, r in reqs.items()},
                       "l3": l3_evidence(folder / safe_name("L1+L2+L3"), onset, NIC)
                       if onset else None}
        print(f"multiturn {st.key}: done", file=sys.stderr, flush=True)
    return res


def collect_sessions(out: Path, reuse: bool) -> pd.DataFrame:
    """One row per (model, batch, workload seed); seed 0 is the study's own run."""
    rows = []
    for st in SESSIONS:
        for b in st.batches:
            for seed in SESSION_SEEDS:
                name = f"{st.key}_b{b}" + (f"_s{seed}" if seed else "")
                sets = [*session_sets(st, b), *([f"seed={seed}"] if seed else [])]
                folder = out / "runs" / name
                try:
                    runner.run(st.scenario, folder, root=ROOT, sets=sets, reuse=reuse,
                               variants=SESSION_VARIANTS)
                except RuntimeError:  # lost requests: the run exits 1 but writes its folder
                    if not (folder / "run.json").exists():
                        raise
                lost = {v: runner.unfinished(folder, v) for v in ("lru", "session")}
                if any(lost.values()):  # reported as such, never averaged in
                    rows.append({"model": st.title, "batch": b, "seed": seed,
                                 "stalled": ", ".join(f"{v}: {n} requests unfinished"
                                                      for v, n in lost.items() if n)})
                    print(f"session {st.key} batch {b} seed {seed}: STALLED {lost}",
                          file=sys.stderr, flush=True)
                    continue
                m = {v: run_metrics(runner.requests(folder, v)) for v in ("lru", "session")}
                rows.append({"model": st.title, "batch": b, "seed": seed,
                             **session_delta(m["lru"], m["session"])})
                print(f"session {st.key} batch {b} seed {seed}: done", file=sys.stderr,
                      flush=True)
    return pd.DataFrame(rows)


def collect_sweeps(out: Path, reuse: bool) -> dict[str, pd.DataFrame]:
    res = {}
    for sw in SWEEPS:
        df = runner.sweep(sw, out / "sweeps" / sw.key, root=ROOT, reuse=reuse)
        df["cliff_round"] = df["cliff_round"] + 1  # the report counts rounds from 1
        res[sw.key] = df
        print(f"sweep {sw.key}: done", file=sys.stderr, flush=True)
    return res


def _children_cpu_s() -> float:
    """CPU seconds of the finished subprocesses (the runs and sweeps) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def numbers(res: dict) -> dict:
    """The headline numbers as plain JSON."""
    mt = {k: {"metrics": v["metrics"], "x": v["x"]} for k, v in res["multiturn"].items()}
    df = res.get("session_seeds", res["session"])
    ses = df.to_dict(orient="records") if len(df) else []
    return {"multiturn": mt, "session": ses}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.seed_study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "seed_study")
    p.add_argument("--reuse", action="store_true",
                   help="read finished runs and sweeps instead of running them again")
    p.add_argument("--only", action="append", choices=PARTS, default=None,
                   help="run only these parts (repeatable; the report shows what ran)")
    args = p.parse_args(argv)
    parts = set(args.only or PARTS)
    out: Path = args.out.resolve()
    res: dict = {"multiturn": {}, "session": pd.DataFrame(), "sweeps": {}}
    spent: dict[str, float] = {}  # CPU minutes of what ran now (reused: nothing)
    for part, collect in (("multiturn", collect_multiturn), ("session", collect_sessions),
                          ("sweeps", collect_sweeps)):
        if part in parts:
            before = _children_cpu_s()
            res[part] = collect(out, args.reuse)
            spent[part] = (_children_cpu_s() - before) / 60
    ses = res["session"]
    if len(ses):  # the tables and plots read the study's own seed; the spread all of them
        ok = ses["stalled"].isna() if "stalled" in ses else ses["seed"] >= 0
        res["session_seeds"] = ses
        res["session"] = ses[(ses["seed"] == 0) & ok].reset_index(drop=True)
    out.mkdir(parents=True, exist_ok=True)
    cpu_file = out / "cpu.json"  # read now: another invocation may have run other parts
    cpu = json.loads(cpu_file.read_text()) if cpu_file.exists() else {}
    for part, minutes in spent.items():
        cpu[part] = round(minutes + (cpu.get(part, 0.0) if args.reuse else 0.0), 1)
    cpu_file.write_text(json.dumps(cpu, indent=2) + "\n")
    res["readings"] = text.readings(res)
    res["nic"] = NIC
    render(res, out, text.intro(cpu), discussion.discussion(res) + "\n" + text.commands())
    (out / "numbers.json").write_text(json.dumps(numbers(res), indent=2, default=str) + "\n")
    print(f"-> {out / 'README.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
