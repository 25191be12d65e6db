"""Our policy against FGD (and others) on the FGD arrival experiment, paired by seed.

    python benchmarks/own_policy.py --data-dir ../shared/traces --seeds 42-51 --tuning 42-45
    python benchmarks/own_policy.py --traces openb-default openb-cpu250 --seeds 42-45

For every trace and policy, over the seeds: GPU allocation (%) at column 130
(arrived GPU request = 130 % of capacity) and failed pods, mean ± std
(population std), the paired difference to FGD (same seed = same arrivals and
node ranks) with the number of seeds where the policy beats FGD, and the mean
wall time of one run. ``--tuning`` splits every row into the tuning seeds and
the held-out rest. Failed pods are also broken down by kind (CPU-only, GPU
sharing, 1 whole GPU, multi-GPU). ``--json`` writes every per-seed value (after
each trace), ``--csv`` one row per (trace, policy, seed); ``--reuse`` takes
earlier ``--json`` files and re-runs only the (trace, policy) pairs they lack.
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

import numpy as np

from quasched.sim.arrival import ExperimentConfig, ExperimentResult, run_experiment
from quasched.compat.curves import discrete_curves
from quasched.sim.backends import LocalBackend
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog

DEFAULT_TRACES = tuple(f"openb-{v}" for v in catalog.PAPER_VARIANTS)
DEFAULT_POLICIES = ("fgd", "bestfit", "headroom")
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


def main() -> None:
    parser = paired_arguments(sweep_arguments(__doc__, DEFAULT_TRACES, DEFAULT_POLICIES))
    parser.add_argument("--tuning", type=seed_range, default=[], help="seeds used for tuning (rest: held out)")
    parser.add_argument("--csv", type=Path, help="write one row per trace, policy and seed here")
    args = parser.parse_args()
    paired_sweep(args.traces, args.policies, args.seeds, args.data_dir, args.workers,
                 reused(args.reuse), args.json, args.tuning, args.csv)


if __name__ == "__main__":
    main()
