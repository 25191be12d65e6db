"""GPU failures in the time-based replay: health-aware placement and remediation against health-blind FGD.

    python benchmarks/health.py --data-dir ../shared/traces --seeds 42-51 --heldout 47-51
    python benchmarks/health.py --traces dlrm-2025 --rates 2e-4 --seeds 42-43 --policies fgd health:weight=4
    python benchmarks/health.py --traces dlrm-2025 --repeat 3 --rates 2e-5 --precursor-share 0.5 \
        --policies fgd health "health+drain_errors=2+migrate=device" \
        "health+drain_errors=1+migrate=device+migrate_rule=pays+migrate_at=checkpoint"

A setup (``--policies``) is a policy spec, optionally followed by ``+option=value`` remediation
options of :class:`FailureConfig` (``drain_errors``, ``migrate``, ...; ``drain_h=inf`` cordons for good) and
the benchmark-only clairvoyant reference ``+oracle=flaky`` (the failure model's true flaky nodes cordoned from
the start: a bound, not a scheduler; :func:`oracle_cordon`); the failure model
options are the same for all setups. ``--repeat N`` replays N copies of the trace back to back
(a longer horizon at the same rate). For every trace, failure rate, setup and seed: one replay
(``--departure duration``) whose failure process has ``FailureConfig(rate, seed=seed)`` (so
every setup of a seed sees the same failures) and whose node ranks use the same seed. Recorded:
lost GPU-hours (work since the last checkpoint + restart overheads + on-demand checkpoints, and
each part), interruptions split by what their node had shown before (no earlier error: no health
signal could have avoided those; the run placed after the node's first error: placement could have; there
before it: only a move could have), what the migrations bought (how many averted a kill on the same
failures, the GPU-hours averted, the moves' cost in all and of those that averted nothing), goodput, the time-average GPU allocation and the mean wait. Savings are paired: ``1 − Σ lost / Σ lost_FGD`` over the seeds of a split
(the per-seed ratios are in the CSV); allocation differences are means of per-seed differences
in points. Seeds in ``--heldout`` are reported apart from the others (the ones the defaults
were chosen on). ``--reuse`` takes runs from earlier runs CSVs (same failure options) instead of repeating
them. Writes ``health_runs.csv``, ``health_summary.csv``, ``health_<trace>.png``, ``health_kills.png`` and
``health_tradeoff.png`` (saving against mean wait) to ``--out`` and prints markdown tables.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.federation.scenario import repeat_workload
from quasched.policies.registry import display_label
from quasched.sim.failures import FailureConfig, device_rates, failure_stream, plan_migration
from quasched.sim.replay import replay
from quasched.sim.replay_result import ReplayConfig, ReplayResult
from quasched.sim.work_ledger import Kill, stay_kills
from quasched.traces import catalog

from placement import seed_range, sweep_arguments  # benchmarks/ is on sys.path when run as a script

DEFAULT_TRACES = ("openb-default", "openb-multigpu50", "dlrm-2025")
DEFAULT_POLICIES = ("fgd", "health")
DEFAULT_RATES = (2e-5, 2e-4, 1e-3)
KEYS = ("device_failures", "warnings", "drains", "migrations", "interruptions", "lost_gpu_h", "lost_work_gpu_h",
        "lost_reload_gpu_h", "lost_checkpoint_gpu_h", "alloc_gpu_h",
        "goodput_pct", "gpu_alloc_avg_pct", "wait_mean_s", "requeue_wait_mean_s", "never_placed")
#: what the migrations bought (:func:`what_moves_bought`)
#: rules priced on an ``always`` run's moves (:func:`what_moves_bought`): ``migrate_rule, migrate_at``
WHAT_IF = {"pays": ("pays", "now"), "pays_lindy": ("pays_lindy", "now"), "pays_checkpoint": ("pays", "checkpoint"),
           "pays_lindy_checkpoint": ("pays_lindy", "checkpoint")}
MOVE_KEYS = ("moves_averting", "averted_gpu_h", "move_cost_gpu_h", "wasted_move_gpu_h",
             *(f"whatif_{name}_gpu_h" for name in ("oracle", *WHAT_IF)))
#: the kills split by what their node had shown before (:func:`kill_split`)
SPLIT_KEYS = ("unsignalled_kills", "placed_after_kills", "there_before_kills", "lost_unsignalled_gpu_h",
              "lost_placed_after_gpu_h", "lost_there_before_gpu_h", "flaky_node_kills")
_INPUTS: dict[tuple[str, int], tuple] = {}


def setup_options(setup: str) -> tuple[str, dict[str, int | float | str]]:
    """``"health+drain_errors=2+migrate=device"`` -> the policy spec and its remediation options."""
    policy, *opts = setup.split("+")
    return policy, {k: _value(v) for k, _, v in (o.partition("=") for o in opts)}


def _value(text: str) -> bool | int | float | str:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def label(setup: str) -> str:
    policy, opts = setup_options(setup)
    return " + ".join([display_label(policy), *(f"{k}={v}" for k, v in opts.items())])


def one_run(trace: str, data_dir: Path, repeat: int, rate: float, setup: str, seed: int, options: dict) -> dict:
    """One replay with failures; the summary figures of :data:`KEYS`."""
    if (trace, repeat) not in _INPUTS:
        nodes, workload = catalog.load_trace(trace, data_dir=data_dir)
        _INPUTS[trace, repeat] = nodes, repeat_workload(workload, repeat) if repeat > 1 else workload
    nodes, workload = _INPUTS[trace, repeat]
    policy, remedies = setup_options(setup)
    oracle = remedies.pop("oracle", None)
    fc = FailureConfig(rate=rate, seed=seed, **options, **remedies)
    start = time.process_time()
    result = replay(nodes, workload, ReplayConfig(policy=policy, seed=seed, failures=fc),
                    oracle_cordon=oracle_cordon(oracle, fc, np.asarray(nodes.num_gpus)))
    s = result.summary()
    return {"trace": trace, "rate": rate, "policy": setup, "seed": seed, **{k: s[k] for k in KEYS},
            **kill_split(result), **what_moves_bought(result),
            "cpu_s": time.process_time() - start}


def oracle_cordon(oracle: object, config: FailureConfig, num_gpus: np.ndarray) -> np.ndarray | None:
    """The clairvoyant reference of a setup's ``+oracle=flaky``: the failure model's true flaky nodes, cordoned
    from the start (a bound on what any node-level health signal could give, not a scheduler option)."""
    if oracle is None:
        return None
    if oracle != "flaky":
        raise ValueError(f"unknown oracle {oracle!r}: the only one is 'flaky' (the failure model's flaky nodes)")
    return device_rates(config, num_gpus)[1]


def what_moves_bought(result: ReplayResult) -> dict[str, float | int]:
    """The run's migrations against staying put on the same failures (:func:`stay_kills`): how many averted a
    kill, the GPU-hours they averted, what the moves cost in all and for nothing (no kill averted), and what
    the same moves' decisions would have lost under each rule of :data:`WHAT_IF` (first order: the rest of the
    run unchanged; meaningful for ``migrate_rule=always`` runs, which move every warned pod)."""
    ledger, fc = result.ledger, result.config.failures
    assert ledger is not None and fc is not None
    tl = result.timeline
    start = float(tl.arrival[tl.order[0]]) if len(tl.order) else 0.0
    kills = stay_kills(ledger.moves, failure_stream(fc, np.asarray(result.nodes.num_gpus), start))
    c, r, k = fc.checkpoint_min * 60, fc.restart_min * 60, fc.checkpoint_cost_min * 60
    stay = np.array([m.stay_loss(kill, c, r) for m, kill in zip(ledger.moves, kills)])
    gpus = ledger.gpus[[m.uid for m in ledger.moves]]
    cost = (np.array([m.cost_s for m in ledger.moves]) + r) * gpus / 3600
    what_if = {"oracle": np.minimum(stay, k + r)}
    for name, (rule, at) in WHAT_IF.items():
        config = replace(fc, migrate="device", migrate_rule=rule, migrate_at=at)
        remaining = np.nan_to_num([m.done_s if rule == "pays_lindy" else m.left_s for m in ledger.moves], nan=np.inf)
        moves = [plan_migration(config, float(left), m.to_checkpoint_s, m.since_s)
                 for m, left in zip(ledger.moves, remaining)]
        what_if[name] = np.array([{"stay": s, "now": k + r, "checkpoint": s if kill < m.to_checkpoint_s else r}[move]
                                  for m, s, kill, move in zip(ledger.moves, stay, kills, moves)])
    return {"moves_averting": int(np.count_nonzero(stay)), "averted_gpu_h": float(stay @ gpus) / 3600,
            "move_cost_gpu_h": float(cost.sum()), "wasted_move_gpu_h": float(cost[stay == 0].sum()),
            **{f"whatif_{name}_gpu_h": float(v @ gpus) / 3600 for name, v in what_if.items()}}


def kill_split(result: ReplayResult) -> dict[str, float]:
    """The run's kills by what the node had shown before: (a) no earlier error (no health signal could have
    avoided them: ``unsignalled``), (b) the run was placed after the node's first error (placement could have),
    (c) the run was there before it (only a move could have); count and lost GPU-hours of each, and the kills
    on flaky nodes."""
    log, fc = result.cluster.errors, result.config.failures
    assert result.ledger is not None and fc is not None
    first = pd.Series(log.time, dtype=float).groupby(pd.Series(log.node, dtype=int)).min()
    kills = pd.DataFrame(result.ledger.kills, columns=list(Kill._fields))
    seen = kills.node.map(first).to_numpy(dtype=float)
    cls = np.select([~(seen < kills.time), kills.run_start >= seen], ["unsignalled", "placed_after"], "there_before")
    lost = kills.lost_gpu_s.to_numpy() / 3600
    flaky = device_rates(fc, np.asarray(result.nodes.num_gpus))[1]
    return {"unsignalled_kills": int(np.sum(cls == "unsignalled")),
            **{f"{c}_kills": int(np.sum(cls == c)) for c in ("placed_after", "there_before")},
            **{f"lost_{c}_gpu_h": float(lost[cls == c].sum()) for c in ("unsignalled", "placed_after", "there_before")},
            "flaky_node_kills": int(flaky[kills.node.to_numpy(dtype=int)].sum())}


def summarise(runs: pd.DataFrame, heldout: set[int]) -> pd.DataFrame:
    """Per trace, rate, policy and split: totals and paired savings against FGD."""
    runs = runs.assign(split=np.where(runs.seed.isin(heldout), "held-out", "tuning"))
    base = runs[runs.policy == "fgd"].set_index(["trace", "rate", "seed"])
    rows = []
    for (trace, rate, policy, split), g in runs.groupby(["trace", "rate", "policy", "split"], sort=False):
        b = base.loc[[(trace, rate, s) for s in g.seed]]
        lost, lost_fgd = g.lost_gpu_h.to_numpy(), b.lost_gpu_h.to_numpy()
        rows.append({
            "trace": trace, "rate": rate, "policy": policy, "split": split, "seeds": len(g),
            "failures": g.device_failures.mean(), "warnings": g.warnings.mean(), "drains": g.drains.mean(),
            "migrations": g.migrations.mean(), "interruptions": g.interruptions.mean(),
            **{k: g[k].mean() for k in (*SPLIT_KEYS, "lost_work_gpu_h", "lost_reload_gpu_h",
                                        "lost_checkpoint_gpu_h", *MOVE_KEYS) if k in g},
            "lost_gpu_h": lost.mean(), "saving_pct": 100 * (1 - lost.sum() / lost_fgd.sum()) if lost_fgd.sum() else np.nan,
            "seeds_better": int(np.sum(lost < lost_fgd)), "goodput_pct": g.goodput_pct.mean(),
            "alloc_pct": g.gpu_alloc_avg_pct.mean(),
            "d_alloc": float(np.mean(g.gpu_alloc_avg_pct.to_numpy() - b.gpu_alloc_avg_pct.to_numpy())),
            "wait_mean_s": g.wait_mean_s.mean(), "never_placed": g.never_placed.mean(), "cpu_s": g.cpu_s.mean(),
        })
    return pd.DataFrame(rows)


def breakdown(s) -> str:
    """``work / reload / checkpoint`` lost GPU-hours of a summary row (blank for runs from before the split)."""
    parts = [getattr(s, f"lost_{cause}_gpu_h", np.nan) for cause in ("work", "reload", "checkpoint")]
    return "" if np.isnan(parts[0]) else " / ".join(f"{p:.2f}" for p in parts)


def moves(s) -> str:
    """What a summary row's migrations bought: ``averting (GPU-h) | cost all / for nothing`` (blank: no moves)."""
    if not getattr(s, "migrations", 0) or np.isnan(getattr(s, "moves_averting", np.nan)):
        return " | "
    return f"{s.moves_averting:.1f} ({s.averted_gpu_h:.2f}) | {s.move_cost_gpu_h:.2f} / {s.wasted_move_gpu_h:.2f}"


def what_if_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """Summary rows of setups that move every warned pod (``migrate_rule`` always) and moved any: the loss of their
    moves' decisions as made and under each rule of :data:`WHAT_IF` and the oracle, with FGD's loss of the split."""
    if "whatif_oracle_gpu_h" not in summary:
        return summary.iloc[:0]
    always = summary.policy.map(lambda setup: setup_options(setup)[1].get("migrate_rule", "always") == "always")
    fgd = summary[summary.policy == "fgd"].set_index(["trace", "rate", "split"]).lost_gpu_h
    rows = summary[always & (summary.migrations > 0)].copy()
    rows["fgd_lost_gpu_h"] = [fgd[(r.trace, r.rate, r.split)] for r in rows.itertuples()]
    return rows


def print_split(summary: pd.DataFrame) -> None:
    """The kills split by what their node had shown before (:func:`kill_split`), per setup and split (runs from
    before the split lack the columns: the caller skips them)."""
    print("\nKills by what the node had shown before: count (lost GPU-h)\n")
    print("| trace | setup | seeds | no earlier error on the node | placed after its first error | there before it "
          "| on flaky nodes | lost GPU-h |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in summary.itertuples():
        cells = [f"{getattr(r, f'{c}_kills'):.1f} ({getattr(r, f'lost_{c}_gpu_h'):.2f})"
                 for c in ("unsignalled", "placed_after", "there_before")]
        print(f"| {r.trace} | {label(r.policy)} | {r.split} | {' | '.join(cells)} | {r.flaky_node_kills:.1f} "
              f"| {r.lost_gpu_h:.2f} |")


def plot_split(path: Path, summary: pd.DataFrame) -> None:
    """Stacked bars per setup and split: lost GPU-hours of the three kinds of kill and of the moves (the rest)."""
    from matplotlib.figure import Figure

    parts = {"no earlier error on the node": "lost_unsignalled_gpu_h", "placed after its first error":
             "lost_placed_after_gpu_h", "there before it": "lost_there_before_gpu_h"}
    fig = Figure(figsize=(10, 1.6 + 0.6 * len(summary)), dpi=110)
    ax = fig.subplots()
    y, left = np.arange(len(summary)), np.zeros(len(summary))
    for name, column in [*parts.items(), ("moves (reload, checkpoint)", None)]:
        width = summary[column].to_numpy() if column else summary.lost_gpu_h.to_numpy() - left
        ax.barh(y, width, left=left, label=name)
        left = left + width
    ax.set_yticks(y, [f"{label(r.policy)}, {r.split}".replace(" + migrate", "\n+ migrate", 1)
                      for r in summary.itertuples()], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("lost GPU-hours per run")
    ax.set_title("Lost GPU-hours by what the killed pod's node had shown before", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    ax.set_xlim(0, 1.02 * float(summary.lost_gpu_h.max()))
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=4)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)


def print_what_if(rows: pd.DataFrame) -> None:
    """The what-if table: GPU-hours the moves' decisions lose, and the points of FGD's loss each rule would add."""
    names = [n for n in (*WHAT_IF, "oracle") if f"whatif_{n}_gpu_h" in rows]  # CSVs of older runs lack some
    print("\nFirst-order what-if on the moves of each run (the rest of the run unchanged): GPU-h the decisions on "
          "warned pods lose (saving vs moving all, in points of FGD's loss)\n")
    print(f"| trace | setup | seeds | moves | move all | {' | '.join(names)} |")
    print("|---|---|---|---:|---:|" + "---:|" * len(names))
    for r in rows.itertuples():
        lost = [getattr(r, f"whatif_{n}_gpu_h") for n in names]
        cells = [f"{v:.2f} ({100 * (r.move_cost_gpu_h - v) / r.fgd_lost_gpu_h:+.1f})" for v in lost]
        print(f"| {r.trace} | {label(r.policy)} | {r.split} | {r.migrations:.1f} | {r.move_cost_gpu_h:.2f} | "
              f"{' | '.join(cells)} |")


def plot_tradeoff(path: Path, summary: pd.DataFrame) -> None:
    """Saving vs FGD against the mean wait's change vs FGD, one colour per setup (hollow: held-out seeds), the
    30 % goal dashed; setups are labelled by what sets them apart."""
    from matplotlib.figure import Figure

    fgd = summary[summary.policy == "fgd"].set_index(["trace", "rate", "split"]).wait_mean_s
    rows = summary[summary.policy != "fgd"]
    setups = list(dict.fromkeys(rows.policy))
    parts = {setup: setup.split("+") for setup in setups}
    common = set.intersection(*(set(p[1:]) for p in parts.values())) if setups else set()
    fig = Figure(figsize=(8, 5.5), dpi=110)
    ax = fig.subplots()
    for r in rows.itertuples():
        colour = f"C{setups.index(r.policy) % 10}"
        wait = 100 * (r.wait_mean_s / fgd[(r.trace, r.rate, r.split)] - 1)
        own = " + ".join([display_label(parts[r.policy][0]), *(o for o in parts[r.policy][1:] if o not in common)])
        ax.scatter(wait, r.saving_pct, s=40, edgecolors=colour, facecolors="none" if r.split == "held-out" else colour,
                   label=f"{own}, {r.split} ({r.d_alloc:+.2f} pt alloc)")
    ax.axhline(30, color="tab:red", ls="--", lw=1, label="goal: 30 % fewer lost GPU-h")
    ax.set_xlabel("mean wait vs FGD, %")
    ax.set_ylabel("lost GPU-hours saved vs FGD, % (paired seeds)")
    ax.set_title(f"Saving against waiting; all setups: {' + '.join(sorted(common))}", fontsize=7)
    ax.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=6, loc="lower center", ncol=2)
    fig.tight_layout(rect=(0, 0.03 + 0.022 * len(rows), 1, 1))
    fig.savefig(path)


def plot_what_if(path: Path, rows: pd.DataFrame) -> None:
    """Bars: GPU-hours the moves' decisions lose per split, moving all against each rule and the oracle."""
    from matplotlib.figure import Figure

    labels = dict(zip(("move_cost", *(f"whatif_{n}" for n in WHAT_IF), "whatif_oracle"),
                      ("move all", "pays", "pays (Lindy)", "pays,\nat checkpoint", "pays (Lindy),\nat checkpoint",
                       "oracle")))
    names = [n for n in labels if f"{n}_gpu_h" in rows]
    fig = Figure(figsize=(7, 4.5), dpi=110)
    ax = fig.subplots()
    width = 0.8 / len(rows)
    for i, r in enumerate(rows.itertuples()):
        ax.bar(np.arange(len(names)) + i * width, [getattr(r, f"{n}_gpu_h") for n in names], width,
               label=f"{r.trace}, {r.split}: {label(r.policy)}")
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, [labels[n] for n in names], fontsize=8)
    ax.set_ylabel("GPU-hours lost by the decisions on warned pods, per run")
    ax.set_title("What the same moves would lose under each rule (first order)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)


def plot(path: Path, trace: str, runs: pd.DataFrame) -> None:
    """Lost GPU-hours per seed (FGD on x, each policy on y) for each rate, log-log."""
    from matplotlib.figure import Figure

    rates = sorted(runs.rate.unique())
    fig = Figure(figsize=(6.5 * len(rates), 5.5), dpi=110)
    axes = np.atleast_1d(fig.subplots(1, len(rates)))
    for ax, rate in zip(axes, rates):
        r = runs[runs.rate == rate]
        fgd = r[r.policy == "fgd"].set_index("seed").lost_gpu_h
        for policy in r.policy.unique():
            if policy == "fgd":
                continue
            mine = r[r.policy == policy].set_index("seed").lost_gpu_h
            ax.scatter(fgd.loc[mine.index], mine, s=14, label=label(policy))
        hi = max(float(r.lost_gpu_h.max()), 1e-3)
        ax.plot([0, hi], [0, hi], color="grey", lw=1, ls=":", label="= FGD")
        ax.plot([0, hi], [0, 0.7 * hi], color="tab:red", lw=1, ls="--", label="30 % less")
        ax.set_xlim(0, 1.05 * hi)
        ax.set_ylim(0, 1.05 * hi)
        ax.set_title(f"{trace}, {rate:g} failures / GPU-hour", fontsize=9)
        ax.set_xlabel("lost GPU-hours, FGD")
        ax.set_ylabel("lost GPU-hours, policy (same seed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = sweep_arguments(__doc__, DEFAULT_TRACES, DEFAULT_POLICIES)
    parser.set_defaults(workers=1)
    parser.add_argument("--rates", type=float, nargs="+", default=list(DEFAULT_RATES))
    parser.add_argument("--heldout", type=seed_range, default=seed_range("47-51"))
    parser.add_argument("--checkpoint-min", type=float, default=30.0)
    parser.add_argument("--restart-min", type=float, default=5.0)
    parser.add_argument("--flaky-share", type=float, default=0.05)
    parser.add_argument("--flaky-factor", type=float, default=20.0)
    parser.add_argument("--precursor-share", type=float, default=0.0)
    parser.add_argument("--precursor-ahead-h", type=float, default=24.0)
    parser.add_argument("--false-warnings", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1, help="replay this many copies of each trace back to back")
    parser.add_argument("--reuse", type=Path, nargs="+", default=[],
                        help="runs CSVs of earlier batches with the same failure options: their runs are not repeated")
    parser.add_argument("--from-csv", action="store_true", help="no runs: table and plots from --out's health_runs.csv")
    parser.add_argument("--out", type=Path, default=Path("results/health"))
    args = parser.parse_args()
    if "fgd" not in args.policies:
        parser.error("savings are measured against fgd: include it in --policies")
    args.out.mkdir(parents=True, exist_ok=True)
    options = {"checkpoint_min": args.checkpoint_min, "restart_min": args.restart_min,
               "flaky_share": args.flaky_share, "flaky_factor": args.flaky_factor,
               "precursor_share": args.precursor_share, "precursor_ahead_h": args.precursor_ahead_h,
               "false_warnings": args.false_warnings}
    if args.from_csv:
        runs = pd.read_csv(args.out / "health_runs.csv")
    else:
        jobs = list(product(args.traces, [args.data_dir], [args.repeat], args.rates, args.policies, args.seeds,
                            [options]))
        done = pd.concat([pd.read_csv(path) for path in args.reuse] if args.reuse else
                         [pd.DataFrame(columns=["trace", "rate", "policy", "seed"])])
        done = done.drop_duplicates(["trace", "rate", "policy", "seed"]).set_index(["trace", "rate", "policy", "seed"])
        todo = [job for job in jobs if (job[0], job[3], job[4], job[5]) not in done.index]
        with ProcessPoolExecutor(args.workers) as pool:
            fresh = pd.DataFrame(pool.map(one_run, *zip(*todo))) if todo else pd.DataFrame()
        reused = done.loc[[key for job in jobs if (key := (job[0], job[3], job[4], job[5])) in done.index]]
        runs = pd.concat([reused.reset_index(), fresh], ignore_index=True)
        runs.to_csv(args.out / "health_runs.csv", index=False)
    summary = summarise(runs, set(args.heldout))
    summary.to_csv(args.out / "health_summary.csv", index=False)
    print("" if args.from_csv else f"options {options}, repeat {args.repeat}; ", end="")
    print("saving = 1 - Σ lost / Σ lost_FGD (same seeds); Δ alloc: time-average GPU allocation, points\n")
    print("| trace | rate /GPU-h | setup | seeds | failures | warnings | drains | migrated | killed (no earlier error "
          "on node) | lost GPU-h | work / reload / checkpoint | moves averting a kill (GPU-h averted) | cost of moves, "
          "all / averting nothing GPU-h | saving vs FGD (seeds better) | goodput % | GPU alloc % | Δ alloc "
          "| mean wait s | CPU s/run |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in summary.itertuples():
        saving = "" if s.policy == "fgd" else f"{s.saving_pct:.1f} % ({s.seeds_better}/{s.seeds})"
        print(f"| {s.trace} | {s.rate:g} | {label(s.policy)} | {s.split} | {s.failures:,.0f} | {s.warnings:,.0f} "
              f"| {s.drains:,.1f} | {s.migrations:,.1f} | {s.interruptions:,.1f} ({getattr(s, 'unsignalled_kills', np.nan):.1f}) "
              f"| {s.lost_gpu_h:,.2f} | {breakdown(s)} | {moves(s)} | {saving} "
              f"| {s.goodput_pct:.4f} | {s.alloc_pct:.3f} | {s.d_alloc:+.3f} | {s.wait_mean_s:,.0f} | {s.cpu_s:.1f} |")
    if "placed_after_kills" in summary:
        print_split(summary)
        plot_split(args.out / "health_kills.png", summary)
        plot_tradeoff(args.out / "health_tradeoff.png", summary)
    what_if = what_if_rows(summary)
    if len(what_if):
        print_what_if(what_if)
        plot_what_if(args.out / "health_what_if.png", what_if)
    for trace in args.traces:
        plot(args.out / f"health_{trace}.png", trace, runs[runs.trace == trace])
    print(f"\nwrote {args.out}/health_runs.csv, health_summary.csv, health_<trace>.png"
          f"{' and health_what_if.png' if len(what_if) else ''}")


if __name__ == "__main__":
    main()
