"""Our policy (Headroom) against FGD and BestFit on the FGD arrival experiment.

    python benchmarks/own_policy.py --data-dir ../shared/traces --seeds 42-51
    python benchmarks/own_policy.py --traces openb-default openb-cpu250 --seeds 42-45

For every trace and policy, over the seeds: GPU allocation (%) at column 130
(arrived GPU request = 130 % of capacity) and failed pods, mean ± std
(population std), the paired difference to FGD (same seed = same arrivals and
node ranks) with the number of seeds where the policy beats FGD, and the mean
wall time of one run. ``--json`` also writes every per-seed value (after each trace);
``--reuse`` takes such files and re-runs only the (trace, policy) pairs they lack.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from quasched.sim.arrival import ExperimentConfig
from quasched.compat.curves import discrete_curves
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog

DEFAULT_TRACES = tuple(f"openb-{v}" for v in catalog.PAPER_VARIANTS)
DEFAULT_POLICIES = ("fgd", "bestfit", "headroom")


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


def paired_sweep(traces: list[str], policies: list[str], seeds: list[int], data_dir: Path, workers: int,
                 reuse: dict[str, dict[str, dict]] | None = None, save: Path | None = None) -> dict[str, dict[str, dict]]:
    """Per trace and policy, per seed: alloc at column 130, failed pods, run time; prints the markdown table.

    ``reuse``: records of an earlier call (``--json``); a (trace, policy) found there with the same seeds is not re-run.
    ``save``: JSON file the records are written to after each trace.
    """
    base = "fgd" if "fgd" in policies else None
    records: dict[str, dict[str, dict]] = {}
    reuse = reuse or {}
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), alloc = GPU allocation % at column 130\n")
    print("| trace | policy | alloc@130 | Δ alloc vs FGD (wins) | failed pods | Δ failed vs FGD (wins) | s/run |")
    print("|---|---|---|---|---|---|---|")
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
                "failed": [int(r.failed) for r in runs],
                "run_s": [float(r.elapsed_s) for r in runs],
                "sweep_wall_s": time.perf_counter() - start,
            }
        for policy in policies:
            rec = records[trace][policy]
            alloc, failed = np.array(rec["alloc"]), np.array(rec["failed"])
            cells = [f"{alloc.mean():.2f} ± {alloc.std():.2f}", "", f"{failed.mean():.1f} ± {failed.std():.1f}", ""]
            if base and policy != base:
                d_alloc = alloc - np.array(records[trace][base]["alloc"])
                d_failed = failed - np.array(records[trace][base]["failed"])
                cells[1] = f"{d_alloc.mean():+.2f} ({int((d_alloc > 0).sum())}/{len(seeds)})"
                cells[3] = f"{d_failed.mean():+.1f} ({int((d_failed < 0).sum())}/{len(seeds)})"
            print(f"| {trace} | {policy} | " + " | ".join(cells) + f" | {np.mean(rec['run_s']):.1f} |", flush=True)
        if save:
            save.write_text(json.dumps(records, indent=1))
    return records


def main() -> None:
    args = paired_arguments(sweep_arguments(__doc__, DEFAULT_TRACES, DEFAULT_POLICIES)).parse_args()
    paired_sweep(args.traces, args.policies, args.seeds, args.data_dir, args.workers,
                 reused(args.reuse), args.json)


if __name__ == "__main__":
    main()
