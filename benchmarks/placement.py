"""Placement policies against FGD on the FGD paper's arrival experiment, paired by seed.

    python benchmarks/placement.py --data-dir ../shared/traces --tuning 42-45
    python benchmarks/placement.py --traces all --seeds 42 --policies random dotprod gpuclustering gpupacking bestfit fgd

For every trace and policy, over the seeds: GPU allocation (%) at column 130
(arrived GPU request = 130 % of capacity) and failed pods, mean ± std
(population std), the paired difference to FGD (same seed = same arrivals and
node ranks) with the number of seeds where the policy beats FGD, and the mean
wall time of one run. ``--tuning`` splits every row into the tuning seeds and
the held-out rest. Failed pods are also broken down by kind (CPU-only, GPU
sharing, 1 whole GPU, multi-GPU). ``--json`` writes every per-seed value (after
each trace; default ``results/placement/runs.json``), ``--csv`` one row per (trace, policy, seed); ``--reuse`` takes
earlier ``--json`` files and re-runs only the (trace, policy) pairs they lack.
``--plot`` draws each seed's difference to FGD per trace (tuning and held-out seeds
in two colours); ``--traces all`` runs every openb trace of the catalogue.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Callable, TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from quasched.sim.arrival import ExperimentConfig, ExperimentResult, run_experiment  # noqa: E402
from quasched.compat.curves import discrete_curves  # noqa: E402
from quasched.sim.backends import LocalBackend  # noqa: E402
from quasched.sim.sweep import run_sweep  # noqa: E402
from quasched.traces import catalog  # noqa: E402

DEFAULT_TRACES = tuple(f"openb-{v}" for v in catalog.PAPER_VARIANTS)
DEFAULT_POLICIES = ("fgd", "guard")
KINDS = ("cpu", "share", "gpu1", "multi")
R = TypeVar("R")
_LABEL = re.compile(r"GPU: (\d+) x \{(\d+)\}m")


_SHARED: dict = {}


def _share(nodes, workload) -> None:
    _SHARED.update(nodes=nodes, workload=workload)


def _analysed(task: tuple) -> object:
    policy, seed, analyse = task
    return analyse(run_experiment(_SHARED["nodes"], _SHARED["workload"],
                                  ExperimentConfig(policy=policy, seed=seed, rng="go")))


def analysed_runs(nodes, workload, policies: list[str], seeds: list[int], workers: int,
                  analyse: Callable[[ExperimentResult], R]) -> dict[tuple[str, int], R]:
    """``analyse(result)`` of the arrival run of every (policy, seed), over ``workers`` processes
    (``analyse`` a module-level function: only its small result comes back)."""
    tasks = [(policy, seed, analyse) for policy in policies for seed in seeds]
    return {(p, s): out for (p, s, _), out in LocalBackend(workers).map(_analysed, tasks, _share, (nodes, workload))}


def seed_range(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def sweep_arguments(doc: str | None, traces: tuple[str, ...], policies: tuple[str, ...],
                    parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The options every trace × policy × seed benchmark shares (data dir, seeds, traces, policies, workers),
    on a new parser or added to ``parser``."""
    parser = parser or argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--seeds", type=seed_range, default=seed_range("42-51"))
    parser.add_argument("--traces", nargs="+", default=list(traces))
    parser.add_argument("--policies", nargs="+", default=list(policies))
    parser.add_argument("--workers", type=int, default=2)
    return parser


def paired_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--json`` and ``--reuse`` of :func:`paired_sweep`'s records."""
    parser.add_argument("--json", type=Path, help="write per-seed results here")
    parser.add_argument("--reuse", type=Path, nargs="+", default=[],
                        help="per-seed results of earlier --json runs: runs found there are not repeated")
    return parser


def reused(paths: list[Path]) -> dict[str, dict[str, dict]]:
    """The records of ``--json`` files, merged per trace (later files win)."""
    records: dict[str, dict[str, dict]] = {}
    for path in paths:
        for trace, by_policy in json.loads(path.read_text()).items():
            records.setdefault(trace, {}).update(by_policy)
    return records


def failed_kinds(failed_shapes: Counter) -> dict[str, int]:
    """Failed pods per kind from :func:`quasched.sim.sweep.shape_label` labels."""
    kinds = dict.fromkeys(KINDS, 0)
    for label, n in failed_shapes.items():
        k, milli = map(int, _LABEL.search(label).groups())  # type: ignore[union-attr]
        kinds["cpu" if k == 0 or milli == 0 else "share" if milli < 1000 else "gpu1" if k == 1 else "multi"] += n
    return kinds


def paired(records: dict, policy: str, base: str | None, seeds: list[int]) -> list[str]:
    """Table cells of ``policy`` over ``seeds``: alloc, Δ alloc (wins), failed, Δ failed (wins)."""
    rec = records[policy]
    pick = [rec["seeds"].index(s) for s in seeds]
    alloc, failed = np.array(rec["alloc"])[pick], np.array(rec["failed"])[pick]
    cells = [f"{alloc.mean():.2f} ± {alloc.std():.2f}", "", f"{failed.mean():.1f} ± {failed.std():.1f}", ""]
    if base and policy != base:
        d_alloc = alloc - np.array(records[base]["alloc"])[pick]
        d_failed = failed - np.array(records[base]["failed"])[pick]
        cells[1] = f"{d_alloc.mean():+.2f} ({int((d_alloc > 0).sum())}/{len(seeds)})"
        cells[3] = f"{d_failed.mean():+.1f} ({int((d_failed < 0).sum())}/{len(seeds)})"
    return cells


def paired_sweep(traces: list[str], policies: list[str], seeds: list[int], data_dir: Path, workers: int,
                 reuse: dict[str, dict[str, dict]] | None = None, save: Path | None = None,
                 tuning: list[int] | None = None, csv_path: Path | None = None) -> dict[str, dict[str, dict]]:
    """Per trace and policy, per seed: alloc at columns 130 and 100, failed pods (by kind), run time;
    prints the markdown table (one row per seed group: all, or tuning and held-out).

    ``reuse``: records of an earlier call (``--json``); a (trace, policy) found there with the same seeds is not re-run.
    ``save`` / ``csv_path``: JSON / CSV files the records are written to after each trace.
    """
    groups = [("all", seeds)]
    if tuning:
        groups = [(g, chosen) for g, chosen in (("tuning", [s for s in seeds if s in tuning]),
                                                 ("held-out", [s for s in seeds if s not in tuning])) if chosen]
    base = "fgd" if "fgd" in policies else None
    records: dict[str, dict[str, dict]] = {}
    reuse = reuse or {}
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), alloc = GPU allocation % at column 130\n")
    print("| trace | policy | seeds | alloc@130 | Δ alloc vs FGD (wins) | failed pods | Δ failed vs FGD (wins) "
          "| failed " + "/".join(KINDS) + " | s/run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for trace in traces:
        nodes, workload = catalog.load_trace(trace, data_dir=data_dir)
        records[trace] = {}
        for policy in policies:
            if reuse.get(trace, {}).get(policy, {}).get("seeds") == seeds:
                records[trace][policy] = reuse[trace][policy]
                continue
            start = time.perf_counter()
            runs = run_sweep(nodes, workload, [policy], seeds, ExperimentConfig(rng="go"), curves=discrete_curves,
                             workers=workers)
            records[trace][policy] = {
                "seeds": [r.seed for r in runs],
                "alloc": [float(r.curves.alloc[130]) for r in runs],
                "alloc100": [float(r.curves.alloc[100]) for r in runs],
                "failed": [int(r.failed) for r in runs],
                "failed_kinds": [failed_kinds(r.failed_shapes) for r in runs],
                "run_s": [float(r.elapsed_s) for r in runs],
                "sweep_wall_s": time.perf_counter() - start,
            }
        for policy in policies:
            rec = records[trace][policy]
            for group, chosen in groups:
                pick = [rec["seeds"].index(s) for s in chosen]
                kinds = "/".join(f"{np.mean([rec['failed_kinds'][i][k] for i in pick]):.0f}" for k in KINDS) \
                    if "failed_kinds" in rec else "-"
                cells = paired(records[trace], policy, base, chosen) + [kinds]
                print(f"| {trace} | {policy} | {group} | " + " | ".join(cells) +
                      f" | {np.mean(np.array(rec['run_s'])[pick]):.1f} |", flush=True)
        if save:  # after every trace, so a long sweep leaves its finished traces behind
            save.write_text(json.dumps(records, indent=1))
        if csv_path:
            write_csv(csv_path, records)
    return records


def write_csv(path: Path, records: dict[str, dict[str, dict]]) -> None:
    """One row per (trace, policy, seed): alloc@130, alloc@100, failed pods (total and by kind), run time."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["trace", "policy", "seed", "alloc130", "alloc100", "failed", *(f"failed_{k}" for k in KINDS), "run_s"])
        for trace, by_policy in records.items():
            for policy, rec in by_policy.items():
                for i, seed in enumerate(rec["seeds"]):
                    kinds = rec["failed_kinds"][i] if "failed_kinds" in rec else dict.fromkeys(KINDS, "")
                    out.writerow([trace, policy, seed, f"{rec['alloc'][i]:.4f}", f"{rec.get('alloc100', rec['alloc'])[i]:.4f}",
                                  rec["failed"][i], *(kinds[k] for k in KINDS), f"{rec['run_s'][i]:.2f}"])


def plot_deltas(path: Path, records: dict[str, dict[str, dict]], policy: str, tuning: list[int],
                base: str = "fgd") -> None:
    """Per trace, each seed's Δ alloc@130 of ``policy`` against ``base`` (tuning and held-out seeds in two colours)."""
    traces = [t for t in records if policy in records[t] and base in records[t]]
    fig, ax = plt.subplots(figsize=(12, 4))
    for x, trace in enumerate(traces):
        ours, fgd = records[trace][policy], records[trace][base]
        d = np.array(ours["alloc"]) - np.array(fgd["alloc"])
        tune = np.isin(fgd["seeds"], tuning)
        for offset, pick, colour, label in ((-0.1, tune, "tab:blue", "tuning seeds"),
                                            (0.1, ~tune, "tab:orange", "held-out seeds")):
            ax.scatter(np.full(pick.sum(), x + offset), d[pick], color=colour, s=12, label=label if x == 0 else None)
        ax.hlines(d.mean(), x - 0.3, x + 0.3, color="black")
    ax.axhline(0, color="grey", lw=0.8)
    save_trace_axes(fig, ax, traces, f"alloc@130: {policy} − {base} (points)", path)


def save_trace_axes(fig, ax, traces: list[str], ylabel: str, path: Path) -> None:
    """Trace names on x, ``ylabel``, legend and grid; save to ``path`` and close."""
    ax.set_xticks(range(len(traces)), [t.removeprefix("openb-") for t in traces], rotation=45)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = paired_arguments(sweep_arguments(__doc__, DEFAULT_TRACES, DEFAULT_POLICIES))
    parser.add_argument("--tuning", type=seed_range, default=[], help="seeds used for tuning (rest: held out)")
    parser.add_argument("--csv", type=Path, help="write one row per trace, policy and seed here")
    parser.add_argument("--plot", type=Path, default=Path("results/placement/delta.png"),
                        help="draw each seed's Δ to FGD of the first other policy here")
    args = parser.parse_args()
    if args.traces == ["all"]:
        args.traces = [n for n in catalog.list_traces() if n.startswith("openb-")]
    args.json = args.json or Path("results/placement/runs.json")
    args.csv = args.csv or args.json.with_suffix(".csv")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    records = paired_sweep(args.traces, args.policies, args.seeds, args.data_dir, args.workers,
                           reused(args.reuse), args.json, args.tuning, args.csv)
    others = [p for p in args.policies if p != "fgd"]
    if args.plot and others and "fgd" in args.policies:
        plot_deltas(args.plot, records, others[0], args.tuning)


if __name__ == "__main__":
    main()
