"""Section 4's readings of the three gaps the first report left without a measured cause
(issue 13): the L2 share of arrival-time L3 prefetches under the seed's ``timeout`` policy,
session-aware eviction over several workload seeds and against SGLang's policy line by
line, and what moves Inkling-Small's mean TTFT. Every number is read off the runs."""

from __future__ import annotations

import pandas as pd

from sim.seed_study.spec import MULTITURN, SESSIONS, WAIT, moved_by

SHARE, OVER = "scheduler.prefetch_share", "scheduler.prefetch_over_share"
PR = "https://github.com/sgl-project/sglang/pull/29173"

# SGLang's session-aware eviction (PR 29173 as merged: UnifiedRadixCache's session reference
# tracker and its Full / SWA / Mamba components) against ours (hicache/tree/eviction.py,
# radix.py reference_session / close_session, residency.py), one line per rule.
SGLANG_VS_OURS = (
    ("Full KV: what a finished request references",
     "its path root -> last node, once per session", "the same", "same"),
    ("Full KV: eviction order, L1 and L2",
     "(referenced, references, base policy key)", "the same key, L1 and L2", "same"),
    ("Full KV: a path that forks off the last one (the next prompt does not carry the "
     "last output: reasoning dropped)", "one more end: every node counts one reference per "
     "end of the session's paths below it, so the shared trunk outranks the branches",
     f"the same count (section {moved_by(('pro_reasoning',))})", "same"),
    ("close_session", "drops the references, frees nothing", "the same", "same"),
    ("a referenced leaf evicted", "the session's frontier falls back to its parent",
     "the same (an end falls back to its parent; one whose parent is an end already takes "
     "its reference with it)", "same"),
    ("SWA windows", "only the window + one page before each session's frontier is "
     "referenced; the SWA pool's LRU evicts unreferenced windows first",
     "the whole path counts as referenced (`session_coverage: path`, ours) or SGLang's "
     "rule (`component`); DeepSeek-V4's 128-token windows: per-request state in the "
     "study's rows, an SWA pool of 0.1 x the full pool's tokens (SGLang's size) with "
     f"`track_components` (section {moved_by(('pro_swa',))})", "differs (path) / same (component)"),
    ("Mamba states", "only the frontier's state is referenced",
     "every state on the path counts as referenced", "differs"),
    ("a referenced component on an unreferenced leaf",
     "an unreferenced trigger may not evict it", "references are per node, so the leaf "
     "is referenced", "same effect"),
    ("aborted requests, reopened ids", "not registered (generation fencing)",
     "every finished request registers; ids are never reused", "not exercised"),
)


def _pct(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.0%}"


def prefetch_share(df: pd.DataFrame | None, r: dict | None) -> str:
    """V4-Flash L3 under ``timeout`` by the prefetch share and wait / skip."""
    if df is None or r is None:
        return ""
    st = next(s for s in MULTITURN if s.key == "dsv4_flash")
    l1 = r["metrics"]["L1"]["input_tps"]
    pts = {(float(row[SHARE]), str(row[OVER])): row for _, row in df.iterrows()}
    best = max(pts.values(), key=lambda x: x["effective_input_throughput_tps"])
    x = {k: v["effective_input_throughput_tps"] / l1 for k, v in pts.items()}
    text = (f"**{st.title}: the arrival-time prefetch share** (section "
            f"{moved_by(('dsv4_prefetch_share',))}, the seed's `timeout` policy). "
            + "; ".join(f"share {s:g} {o}: {x[(s, o)]:.1f}x L1, hit "
                        f"{_pct(v['hit_rate'])} (L3 {_pct(v['l3_hit_rate'])}), mean TTFT "
                        f"{v['ttft_mean_s']:.1f} s" for (s, o), v in pts.items()) + ". ")
    if (0.4, "skip") in pts and (0.25, "wait") in pts:
        text += (f"SGLang's own limit and rule (share 0.4, skip) gives {x[(0.4, 'skip')]:.1f}x "
                 f"against our default's {x[(0.25, 'wait')]:.1f}x; the best point swept, "
                 f"share {float(best[SHARE]):g} {best[OVER]}, "
                 f"{best['effective_input_throughput_tps'] / l1:.1f}x (published "
                 f"{st.published['x_l3']:.1f}x; wait_complete "
                 f"{r['x'].get(WAIT, float('nan')):.1f}x). ")
        waits = [v for (_, o), v in pts.items() if o == "wait"]
        if len({round(float(v["effective_input_throughput_tps"]), 3) for v in waits}) == 1:
            text += ("Under `wait` every share gives the same run: at this L2 size the share "
                     "never binds, so it is not what holds the timeout run back. ")
        text += ("`skip` changes the run (a prefetch reserves its whole rest, evicting L2 "
                 "for it, and one over the share is never retried). " + (
                     "No point swept comes within 20% of the published multiplier: the gap "
                     "is the stop policy itself (section "
                     f"{moved_by(('dsv4_prefetch',))}), not the share or the skip rule."
                     if best["effective_input_throughput_tps"] / l1
                     < 0.8 * st.published["x_l3"] else
                     "The share is what moves it toward the published figure."))
    return text


def session_spread(seeds: pd.DataFrame | None) -> str:
    """Mean and range over the workload seeds of each session row's TTFT change."""
    if seeds is None or not len(seeds) or "seed" not in seeds:
        return ""
    n = seeds["seed"].nunique()
    stalled = seeds[seeds["stalled"].notna()] if "stalled" in seeds else seeds.iloc[:0]
    seeds = seeds.drop(stalled.index)
    parts, covered = [], []
    for st in SESSIONS:
        g = seeds[seeds["model"] == st.title]
        for b, rows in g.groupby("batch"):
            c, dv = rows["ttft_change_pct"], rows["device_session"] - rows["device_lru"]
            parts.append(f"{st.title} batch {int(b)}: {c.mean():+.1f}% "
                         f"[{c.min():+.1f}%, {c.max():+.1f}%], device hit "
                         f"{100 * dv.mean():+.1f} points [{100 * dv.min():+.1f}, "
                         f"{100 * dv.max():+.1f}]")
            pub = st.published.get(int(b), {}).get("ttft_change_pct")
            if pub is not None:
                inside = c.min() <= pub <= c.max()
                covered.append(f"{st.title} batch {int(b)} ({pub:+.1f}%: "
                               f"{'inside' if inside else 'outside'})")
    lost = "".join(f" {r['model']} batch {int(r['batch'])} seed {int(r['seed'])} did not "
                   f"finish ({r['stalled']}: the scheduler stalled, a liveness bug this "
                   "study found); it is left out of the range." for _, r in stalled.iterrows())
    return (f"**Session-aware eviction over {n} workload seeds** (mean TTFT change against "
            f"LRU, mean [min, max]; device hit change in points): " + "; ".join(parts)
            + ". The published figure against our seeds' range: " + ", ".join(covered) + "."
            + lost)


def coverage_points(df: pd.DataFrame | None) -> list[str]:
    """'SWA 60K tokens, component: device hit 38% -> 44%, TTFT -5.1%' per point."""
    if df is None:
        return []
    out = []
    keys = [k for k in ("run.swa_tokens", "cache.session_coverage") if k in df]
    for values, g in df.groupby(keys, sort=False):
        v = g.set_index("variant")
        if "lru" not in v.index:
            continue
        lru = v.loc["lru"]
        values = values if isinstance(values, tuple) else (values,)
        what = ", ".join(f"SWA pool {x / 1e3:,.0f}K tokens" if k == "run.swa_tokens"
                         else str(x) for k, x in zip(keys, values, strict=True))
        for name, rule in (("session", "path"), ("session_component", "component")):
            if name not in v.index:
                continue
            ses = v.loc[name]
            label = what if "cache.session_coverage" in keys else f"{what}, {rule}"
            out.append(f"{label}: device hit {_pct(lru['device_hit_rate'])} -> "
                       f"{_pct(ses['device_hit_rate'])}, TTFT "
                       f"{100 * (ses['ttft_mean_s'] / lru['ttft_mean_s'] - 1):+.1f}%")
    return out


def sglang_policy(sweeps: dict[str, pd.DataFrame]) -> str:
    """The line-by-line comparison as a table, and what the coverage sweeps measured."""
    rows = "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in SGLANG_VS_OURS)
    text = (f"**SGLang's session-aware eviction against ours, line by line** ({PR}, as "
            "merged: session references per cache component):\n\n"
            "| rule | SGLang | ours | |\n|---|---|---|---|\n" + rows + "\n\n"
            "For full-attention KV the two policies decide alike. The rules "
            "that differ are the SWA and MAMBA ones; `cache.session_coverage: component` "
            "adds SGLang's (hicache/tree/session_coverage.py). In SGLang, DeepSeek-V4's "
            "sliding-window KV is a device-only component of the unified tree "
            "(https://github.com/sgl-project/sglang/issues/23639): a device hit ends at the "
            "last node whose window is still in the SWA pool, and session references keep "
            "live sessions' windows there while LRU lets a session idle in a tool call lose "
            "its window. Our V4-Pro rows keep the window as per-request state; section "
            f"{moved_by(('pro_swa',))} tracks it as SGLang does (an SWA pool of 0.1 x the full "
            "pool's tokens, SGLang's V4 default, and larger; backed up to L2, where SGLang "
            "recomputes it after a load) at batch 128. ")
    pts = coverage_points(sweeps.get("pro_swa"))
    if pts:
        text += "Measured there: " + "; ".join(pts) + ". " + _window_verdict(
            sweeps["pro_swa"])
    q = coverage_points(sweeps.get("qwen_coverage"))
    if q:
        text += (f"Qwen3.5 at batch 64 (section {moved_by(('qwen_coverage',))}; published "
                 "-16.6%): " + "; ".join(q) + ".")
        change = _changes(sweeps["qwen_coverage"])
        if {"path", "component"} <= set(change):
            pub, lo, hi = -16.6, *sorted((change["path"], change["component"]))
            text += (f" The published {pub:+.1f}% lies between our two rules' "
                     f"{change['path']:+.1f}% (ours) and {change['component']:+.1f}% "
                     "(SGLang's): what a session protects of the MAMBA states moves this row "
                     "across the published figure, a measured cause of its gap."
                     if lo <= pub <= hi else
                     " SGLang's MAMBA rule does not move that row across the published "
                     "figure.")
    return text


def _window_verdict(df: pd.DataFrame) -> str:
    """Whether any SWA pool swept gives the published V4-Pro batch-128 gain (device hit
    +9 points and TTFT -11%), both within 80% of the published change."""
    pub = next(s for s in SESSIONS if s.key == "dsv4_pro").published[128]
    want_hit = pub["device_session"] - pub["device_lru"]
    best = None
    for pool, g in df.groupby("run.swa_tokens", sort=False):
        v = g.set_index("variant")
        for name in ("session", "session_component"):
            if name in v.index and "lru" in v.index:
                hit = v.loc[name, "device_hit_rate"] - v.loc["lru", "device_hit_rate"]
                ttft = 100 * (v.loc[name, "ttft_mean_s"] / v.loc["lru", "ttft_mean_s"] - 1)
                if best is None or ttft < best[2]:
                    best = (pool, name, ttft, hit)
    if best is None:
        return ""
    lru = df[df["variant"] == "lru"]
    starve = ("LRU's device hit by SWA pool: " + ", ".join(
        f"{r['run.swa_tokens'] / 1e3:,.0f}K tokens {_pct(r['device_hit_rate'])} (all hits "
        f"{_pct(r['hit_rate'])})" for _, r in lru.iterrows()) + ". ")
    pool, name, ttft, hit = best
    near = ttft <= 0.8 * pub["ttft_change_pct"] and hit >= 0.8 * want_hit
    return (starve + f"The largest gain swept: SWA pool {pool / 1e3:,.0f}K tokens, {name}: TTFT "
            f"{ttft:+.1f}%, device hit {100 * hit:+.1f} points (published at batch 128: "
            f"{pub['ttft_change_pct']:+.1f}%, {100 * want_hit:+.0f} points): "
            + ("the cached windows reproduce the published gain, a measured cause of the "
               "gap. " if near else
               "the cached windows do not reproduce the published gain on our sessions. ")
            + "A window is cached where a prefill chunk or a prompt ends (SGLang's "
            "cache_unfinished_req and cache_finished_req), so a device hit ends at the last "
            "such point before a session diverges. What keeps an idle session's chain off the "
            "device under either policy is the FULL L1 (LRU at batch 128, SWA pool 880K: "
            "about 20 running contexts of ~40K tokens lock most of its 0.88M tokens). ")


def _changes(df: pd.DataFrame) -> dict[str, float]:
    """Session-aware mean TTFT change in percent by ``cache.session_coverage``."""
    out = {}
    for cov, g in df.groupby("cache.session_coverage", sort=False):
        v = g.set_index("variant")["ttft_mean_s"]
        out[str(cov)] = 100 * (v["session"] / v["lru"] - 1)
    return out


def inkling_ttft(sweeps: dict[str, pd.DataFrame], r: dict | None) -> str:
    """What moves Inkling-Small's mean TTFT (wait_complete), sweep by sweep."""
    if r is None:
        return ""
    st = next(s for s in MULTITURN if s.key == "inkling_small")
    base = r["metrics"][WAIT]["ttft_mean_s"]
    lines, span = [], {}
    for key, col, unit in (("inkling_growth", "workload.request_length", "tokens"),
                           ("inkling_output", "workload.output_length", "tokens"),
                           ("inkling_think", "workload.think_time", "s"),
                           ("inkling_parallel", "workload.max_parallel", "clients")):
        df = sweeps.get(key)
        if df is None:
            continue
        pts = [(row[col], row["ttft_mean_s"]) for _, row in df.iterrows()]
        span[key] = (min(t for _, t in pts), max(t for _, t in pts))
        lines.append(f"section {moved_by((key,))}: " + ", ".join(
            f"{v:g} {unit} -> {t:.2f} s" for v, t in pts))
    if not lines:
        return ""
    target = st.published["ttft_l3_s"]
    brackets = [k for k, (lo, hi) in span.items() if lo <= target <= hi]
    return (f"**{st.title}: mean TTFT** (published {target:.2f} s; ours {base:.2f} s with "
            "wait_complete), by each assumption not published: " + "; ".join(lines) + ". "
            + (f"The published {target:.2f} s lies within the range of "
               f"{moved_by(tuple(brackets))}: each of these, unpublished, can account for "
               "the gap alone. " if brackets else "No assumption swept alone reaches the published "
               "figure. ")
            + ("The question size was chosen to put the L1+L2 cliff at rounds 18-19 "
               "(setup); a smaller one that matches the TTFT moves the cliffs later (they "
               f"move as 1 / growth, section {moved_by(('dsv4_growth',))}): with our L1 "
               "and hardware no single growth per round gives both the published cliff and "
               "the published TTFT. " if "inkling_growth" in brackets else "")
            + f" Of our {base:.2f} s, {r['metrics'][WAIT]['queue_mean_s']:.2f} s is the wait "
            "from arrival to admission (the queue behind the round's other prefills and, "
            "with wait_complete, the L3 prefetch) and the rest the request's own prefill.")


HITS = "cache.hit_count"


def hit_counting(dsv4: pd.DataFrame | None, ink: pd.DataFrame | None) -> str:
    """What the hit-counting rule does to write_through_selective's backups: V4-Flash's
    tiers under both rules, and Inkling-Small's 64- against 256-token answers."""
    if dsv4 is None:
        return ""
    t = {(str(r[HITS]), str(r["variant"])): r for _, r in dsv4.iterrows()}
    tps = "effective_input_throughput_tps"

    def x(rule: str, v: str) -> float:
        return float(t[(rule, v)][tps] / t[(rule, "L1")][tps])

    def l3(rule: str) -> str:
        return _pct(t[(rule, "L1+L2+L3")]["l3_hit_rate"])

    rules = ("every_insert", "once_per_request")
    text = (f"**Which inserts count a tree hit** (sections "
            f"{moved_by(('dsv4_hits', 'inkling_hits'))}; the seed's write_through_selective "
            "backs a node up on its second hit). DeepSeek-V4-Flash: "
            + "; ".join(f"{rule}: L1+L2 {x(rule, 'L1+L2'):.1f}x L1, L1+L2+L3 "
                        f"{x(rule, 'L1+L2+L3'):.1f}x (L3 {l3(rule)}), "
                        f"wait_complete {x(rule, WAIT):.1f}x" for rule in rules)
            + " (published: 1.5x and 15.5x). With `once_per_request` (SGLang 0.5.23's unified "
            "tree) a turn's new nodes reach their second hit only when the client's next turn "
            "walks them; a tail L1 evicts before that is deleted, never backed up, so once the "
            "conversations outgrow L1 what reaches L2 and L3 stops growing. With "
            "`every_insert` (ours, SGLang's HiRadixCache) a request's output insert walks its "
            "own prompt again: the second hit, at its own finish, backs the prompt up at once. ")
    if ink is not None:
        k = {(str(r[HITS]), int(r["workload.output_length"]), str(r["variant"])): r
             for _, r in ink.iterrows()}
        text += ("Inkling-Small (wait_complete; hit, L3 part): " + "; ".join(
            f"{rule}, {n}-token answers: {_pct(k[(rule, n, WAIT)]['hit_rate'])}, L3 "
            f"{_pct(k[(rule, n, WAIT)]['l3_hit_rate'])}" for rule in rules for n in (64, 256))
            + ". A 64-token answer adds no full page after a page-aligned prompt (page 64), "
            "so no output insert walks the prompt again and `every_insert` then backs up as "
            "`once_per_request` does: the cause of the 64-token row of the answer-length "
            "sweep. ")
    pub = next(s for s in MULTITURN if s.key == "dsv4_flash").published
    near = {rule: abs(x(rule, "L1+L2") / pub["x_l2"] - 1) <= 0.25 for rule in rules}
    l3 = {rule: max(x(rule, "L1+L2+L3"), x(rule, WAIT)) >= 0.5 * pub["x_l3"] for rule in rules}
    text += ("Which rule the published runs had is not stated. Within 25% of the published "
             f"L2 step ({pub['x_l2']:.1f}x): {', '.join(r for r in rules if near[r]) or 'neither'}"
             f"; within a factor of 2 of the published L3 multiplier ({pub['x_l3']:.1f}x): "
             f"{', '.join(r for r in rules if l3[r]) or 'neither'}. No one rule reproduces "
             "both at these sizes; the multi-turn sizes were calibrated under `every_insert`."
             if near != l3 else "")
    return text
