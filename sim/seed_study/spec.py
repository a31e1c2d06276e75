"""What the seed study runs and what it compares against: the studies' scenarios, the
figures seed 003 quotes from SGLang's posts, and the assumption sweeps.

Published figures are as seed 003 (``shared/seeds/003_*``) quotes them from SGLang's HiCache
and Unified Radix Cache posts (LMSYS, 2026-08-11; SGLang, 2026-09-23) and from the
session-aware eviction work (https://github.com/sgl-project/sglang/pull/29173). The seed
reads the multi-turn curves as "a rough reading of the figure"; so do we.
"""

from __future__ import annotations

from dataclasses import dataclass

TIERS = ("L1", "L1+L2", "L1+L2+L3")
WAIT = "L1+L2+L3 wait_complete"  # ours: L1+L2+L3 with prefetches that run to completion


@dataclass(frozen=True)
class MultiturnStudy:
    key: str
    title: str
    scenario: str  # relative to the repository root
    published: dict
    moved_by: dict[str, tuple[str, ...]]  # published quantity -> keys of the sweeps moving it


@dataclass(frozen=True)
class SessionStudy:
    key: str
    title: str
    scenario: str
    batches: tuple[int, ...]
    published: dict[int, dict[str, float]]  # batch -> figures
    moved_by: tuple[str, ...] = ()  # keys of the sweeps that move its differences


@dataclass(frozen=True)
class Sweep:
    """``hicache-lab sweep`` of one assumption over one study's scenario, at the study's
    full scale; ``sets`` are ``--set`` items applied before the grid."""

    key: str
    study: str
    grid: tuple[tuple[str, tuple], ...]
    variants: tuple[str, ...]
    sets: tuple[str, ...] = ()
    question: str = ""
    label: str = ""  # a few words for the tables' "what moves it" column


MULTITURN = (
    MultiturnStudy(
        "dsv4_flash", "DeepSeek-V4-Flash, 64 clients",
        "scenarios/seed_study/multiturn_dsv4_flash.yaml",
        {"cliff": (35, 40), "late_hit_l3": 0.98, "x_l3": 15.5, "x_l2": 1.5,
         "ttft_l3_max_s": 9.0},
        {"cliff": ("dsv4_growth", "dsv4_ratio"),
         "late_hit_l3": ("dsv4_prefetch", "dsv4_prefetch_share"),
         "x_l3": ("dsv4_prefetch", "dsv4_prefetch_share", "dsv4_output"),
         "x_l2": ("dsv4_ratio", "dsv4_hits"),
         "ttft": ("dsv4_prefetch", "dsv4_prefetch_share")}),
    MultiturnStudy(
        "inkling_small", "Inkling-Small, 48 clients",
        "scenarios/seed_study/multiturn_inkling_small.yaml",
        {"cliff": (18, 19), "late_hit_l3": 0.968, "x_l3": 67.1 / 15.5, "x_l2": 1.4,
         "ttft_l3_s": 1.23, "tps_l3": 67_100.0, "tps_l1": 15_500.0},
        {"cliff": ("inkling_l1",), "late_hit_l3": ("inkling_prefetch",),
         "x_l3": ("inkling_prefetch", "inkling_swa", "dsv4_output", "inkling_hits"),
         "x_l2": ("inkling_l1", "inkling_hits"),
         "ttft": ("inkling_prefetch", "inkling_swa", "inkling_barrier", "inkling_growth",
                  "inkling_output", "inkling_think", "inkling_parallel", "inkling_hits"),
         "tps": ()}),
)

SESSIONS = (
    SessionStudy(
        "dsv4_pro", "DeepSeek-V4-Pro TP8", "scenarios/seed_study/agent_dsv4_pro.yaml",
        (32, 64, 128, 256),
        {128: {"ttft_change_pct": -11.0, "device_lru": 0.42, "device_session": 0.51},
         256: {"ttft_change_pct": -2.9}},
        ("pro_l1", "pro_tool_time", "pro_swa", "pro_reasoning")),
    SessionStudy(
        "qwen3_5", "Qwen3.5-397B-A17B TP8", "scenarios/seed_study/agent_qwen3_5.yaml",
        (32, 64, 128, 256),
        {32: {"ttft_change_pct": -13.5, "device_lru": 0.05, "device_session": 0.34},
         64: {"ttft_change_pct": -16.6, "device_host_lru": 0.58,
              "device_host_session": 0.67}}, ("qwen_l1", "qwen_mamba", "qwen_coverage")),
)

SESSION_SEEDS = (0, 1, 2)  # each session row runs with these workload seeds
SESSION_VARIANTS = ("lru", "session")  # the rows' variants (a scenario may define more)
MAMBA_STATE_BYTES = 24_145_920  # one Qwen3.5 checkpoint per rank (45 x 536,576 B)


def batch_sets(batch: int) -> tuple[str, ...]:
    """``--set`` items for ``batch`` sessions in flight: as many running requests, twice
    as many sessions in all (the session rows and the sweeps at one batch)."""
    return (f"scheduler.max_running_requests={batch}", f"workload.max_sessions={batch}",
            f"workload.num_sessions={2 * batch}")


def session_sets(study: SessionStudy, batch: int) -> list[str]:
    """``--set`` items that put a session study at ``batch`` sessions in flight: as many
    running requests, twice as many sessions in all; for Qwen3.5 the MAMBA pool (3 slots per
    running request) comes out of the 70 GB per-rank KV budget before the full pool."""
    sets = list(batch_sets(batch))
    if study.key == "qwen3_5":
        full = int((70e9 - 3 * batch * MAMBA_STATE_BYTES) // 15_360)
        sets.append(f"cache.device_tokens={full}")
    return sets


SWEEPS = (
    Sweep("dsv4_growth", "dsv4_flash",
          (("workload.request_length", (4950, 9950, 14950)),), ("L1", "L1+L2"),
          label="growth per round",
          question="Per-round growth (question + 256-token answer): where do the L1 and "
                   "L1+L2 cliffs fall?"),
    Sweep("dsv4_ratio", "dsv4_flash",
          (("cache.hicache_ratio", (1.25, 1.5, 2)),), ("L1+L2",),
          label="L2 size",
          question="L2 size (--hicache-ratio; the seed's is 2): the L1+L2 cliff and what L2 "
                   "buys over L1."),
    Sweep("dsv4_prefetch", "dsv4_flash",
          (("cache.hicache_storage_prefetch_policy", ("timeout", "wait_complete",
                                                      "best_effort")),),
          ("L1+L2+L3",),
          label="prefetch policy",
          question="L3 prefetch stop policy (the seed's is timeout): how much of L3 reaches "
                   "the requests?"),
    Sweep("dsv4_prefetch_share", "dsv4_flash",
          (("scheduler.prefetch_share", (0.25, 0.4, 0.8)),
           ("scheduler.prefetch_over_share", ("wait", "skip"))), ("L1+L2+L3",),
          label="prefetch share of L2",
          question="Share of L2 that arrival-time L3 prefetches may hold (ours 0.25; "
                   "SGLang's 0.8 x (L2 - L1) is 0.4 of L2 at ratio 2), and a prefetch over "
                   "it waiting for the queue head (ours) or skipped (SGLang); seed's "
                   "timeout policy."),
    Sweep("dsv4_output", "dsv4_flash",
          (("workload.output_length", (64, 256, 1024)),), TIERS,
          sets=("cache.hicache_storage_prefetch_policy=wait_complete",),
          label="answer length",
          question="Answer length (the decode work no cache removes; wait_complete): how do "
                   "the multipliers move?"),
    Sweep("dsv4_hits", "dsv4_flash",
          (("cache.hit_count", ("every_insert", "once_per_request")),), (*TIERS, WAIT),
          label="hit counting",
          question="Which inserts count a tree hit, which write_through_selective backs up "
                   "on the second of: every insert walking a node, a request's own output "
                   "insert over its prompt included (ours, SGLang's HiRadixCache), or each "
                   "request once per node (SGLang 0.5.23's unified tree, inserted_len)?"),
    Sweep("inkling_l1", "inkling_small",
          (("cache.device_tokens", (1420000, 2840000, 5680000)),), ("L1", "L1+L2"),
          label="L1 size",
          question="L1 size (our SWA-kept-per-token accounting vs SGLang's smaller SWA "
                   "pool): where do the cliffs fall?"),
    Sweep("inkling_prefetch", "inkling_small",
          (("cache.hicache_storage_prefetch_policy", ("timeout", "wait_complete",
                                                      "best_effort")),),
          ("L1+L2+L3",),
          label="prefetch policy",
          question="L3 prefetch stop policy on Inkling-Small (the seed's is timeout)."),
    Sweep("inkling_swa", "inkling_small",
          (("model", ("inkling-small-tp8", "inkling-small-global-kv-tp8")),),
          ("L1+L2+L3",), sets=("cache.hicache_storage_prefetch_policy=wait_complete",),
          label="SWA KV in the tiers",
          question="Do the local (sliding-window) layers' KV travel with every page (ours: "
                   "21.5 KB per token) or stay in an SWA pool (3.6 KB)? (wait_complete)"),
    Sweep("inkling_barrier", "inkling_small",
          (("workload.round_barrier", ("true", "false")),), ("L1+L2+L3",),
          sets=("cache.hicache_storage_prefetch_policy=wait_complete",),
          label="round barrier",
          question="Arrivals (wait_complete): every client's turn at once after a round "
                   "barrier (ours), or each client on its own (think time 0)?"),
    Sweep("inkling_growth", "inkling_small",
          (("workload.request_length", (1536, 3072, 6144)),), (WAIT,),
          label="growth per round",
          question="Inkling-Small's question per round (ours 6,144 tokens + a 256-token "
                   "answer; not published), wait_complete: what does it do to mean TTFT?"),
    Sweep("inkling_output", "inkling_small",
          (("workload.output_length", (64, 256, 1024)),), (WAIT,),
          label="answer length",
          question="Inkling-Small's answer length (ours 256; not published), "
                   "wait_complete: mean TTFT."),
    Sweep("inkling_think", "inkling_small",
          (("workload.think_time", (0, 10, 60)),), (WAIT,),
          sets=("workload.round_barrier=false",),
          label="think time",
          question="Inkling-Small without the round barrier, by seconds between a "
                   "client's answer and its next question (not published), wait_complete: "
                   "mean TTFT."),
    Sweep("inkling_parallel", "inkling_small",
          (("workload.max_parallel", (12, 24, 48)),), (WAIT,),
          label="clients in flight",
          question="Inkling-Small by how many of the 48 clients may have a request in "
                   "flight (ours 48: all), wait_complete: mean TTFT."),
    Sweep("inkling_hits", "inkling_small",
          (("cache.hit_count", ("every_insert", "once_per_request")),
           ("workload.output_length", (64, 256))), ("L1+L2", WAIT),
          label="hit counting",
          question="Which inserts count a tree hit, which write_through_selective backs up "
                   "on the second of (ours: every insert walking a node, a request's own "
                   "output insert over its prompt included, as SGLang's HiRadixCache; "
                   "SGLang 0.5.23's unified tree: each request once per node), by answer "
                   "length: a 64-token answer adds no full page to insert after its prompt."),
    Sweep("pro_l1", "dsv4_pro",
          (("cache.device_tokens", (880000, 2640000, 3000000, 3400000, 3800000, 4400000)),),
          ("lru", "session"),
          sets=batch_sets(128),
          label="L1 size",
          question="L1 size at batch 128 (H200: 0.88M tokens; a 180 GB B200 would hold "
                   "4.2M; 3.0-3.8M: the live sessions' paths about fit and closed "
                   "sessions' compete with them): device hit and the session-aware gain."),
    Sweep("pro_tool_time", "dsv4_pro",
          (("workload.tool_time", (2, 10, 30)),), ("lru", "session"),
          sets=(*batch_sets(128), "cache.device_tokens=2640000"),
          label="tool time",
          question="Seconds between an agent's steps at batch 128 (L1 2.64M tokens, where "
                   "LRU's device hit is near the published 42%): how long must live sessions "
                   "sit idle for session-aware eviction to pay?"),
    Sweep("pro_swa", "dsv4_pro",
          (("run.swa_tokens", (88000, 264000, 880000)),),
          ("lru", "session", "session_component"),
          sets=("scheduler.track_components=true", *batch_sets(128)),
          label="SWA windows cached",
          question="DeepSeek-V4's windows cached as SGLang caches them (ours: per-request "
                   "state), batch 128, by the SWA pool's size (SGLang's V4 default 0.1 x "
                   "the full pool: 88K tokens; 0.3; 1.0) and what a live "
                   "session protects (session: its whole path, ours; session_component: "
                   "the window before its frontier, SGLang's). Does protecting live "
                   "sessions' windows move the device hit?"),
    Sweep("qwen_l1", "qwen3_5",
          (("cache.device_tokens", (4406379, 1100000, 275000)),), ("lru", "session"),
          sets=batch_sets(32),
          label="L1 size",
          question="L1 size at batch 32 (4.4M tokens, as the study; 1/4; 1/16): device "
                   "hit and the session-aware gain when the sessions outgrow L1."),
    Sweep("qwen_coverage", "qwen3_5",
          (("cache.session_coverage", ("path", "component")),), ("lru", "session"),
          sets=(*batch_sets(64), "cache.device_tokens=4255467"),
          label="MAMBA states protected",
          question="Qwen3.5 at batch 64 (published -16.6%): a session protecting every "
                   "MAMBA checkpoint on its path (ours) or its frontier's only (SGLang)."),
    Sweep("qwen_mamba", "qwen3_5",
          (("run.mamba_slots", (48, 96, 192)),), ("lru", "session"),
          sets=batch_sets(32),
          label="MAMBA slots",
          question="MAMBA checkpoint slots at batch 32 (default 3 per running request): "
                   "device hit and the session-aware gain."),
    Sweep("pro_reasoning", "dsv4_pro",
          (("workload.reasoning_length", (0, 1024, 3072)),), ("lru", "session"),
          sets=(*batch_sets(128), "cache.device_tokens=2640000"),
          label="reasoning dropped",
          question="A thinking model's reasoning before each tool call, not carried into "
                   "the next prompt (ours 0: the whole output is), batch 128, L1 2.64M "
                   "tokens: every step's KV forks off the next prompt, so LRU keeps each "
                   "session's newest abandoned branch while SGLang's session references "
                   "count once per branch end (a forked trunk holds more than a branch). "
                   "Does session-aware eviction then pay?"),
)


def scenario_of(sw: Sweep) -> str:
    """The scenario file of the study a sweep varies."""
    for st in (*MULTITURN, *SESSIONS):
        if st.key == sw.study:
            return st.scenario
    raise KeyError(f"sweep {sw.key!r}: no study {sw.study!r}")


def moved_by(keys: tuple[str, ...]) -> str:
    """Section-3 references of the sweeps ``keys`` ("3.2 L2 size, 3.4 answer length")."""
    index = {sw.key: i for i, sw in enumerate(SWEEPS, start=1)}
    return ", ".join(f"3.{index[k]} {SWEEPS[index[k] - 1].label}" for k in keys) or (
        "hardware and sizes not published (section 4)")
