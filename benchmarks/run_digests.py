"""Per-run digests of the arrival experiment, to prove a change kept every run exact.

    python benchmarks/run_digests.py --data-dir ../shared/traces > new.txt
    git worktree add /tmp/old <commit> && (cd /tmp/old && PYTHONPATH=. python <this script> ...) > old.txt
    diff old.txt new.txt        # empty = every placement and every recorded value identical

One line per (trace, policy) at ``--seed`` with ``--rng go``: the SHA-256 of the per-event
node choices, allocated GPU milli and fragmentation (repr of the floats), over every openb
trace and the six paper policies (``--policies`` for others; ``--all-columns``: the bytes of every recorded column
instead). Works on older commits too (their event field names).
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import fields
from pathlib import Path

import numpy as np

from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.traces import catalog

POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")


def digest(events, all_columns: bool = False) -> str:
    h = hashlib.sha256()
    if all_columns:  # the bytes of every recorded column
        for f in fields(events):
            h.update(np.ascontiguousarray(getattr(events, f.name)).tobytes())
        return h.hexdigest()[:16]
    used = getattr(events, "used_gpu_milli", None)
    used = used if used is not None else events.used_milli
    for column in (events.node, used):
        h.update(np.asarray(column, dtype=np.int64).tobytes())
    h.update(repr(np.asarray(events.frag_milli).tolist()).encode())
    return h.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--traces", nargs="*", default=None)
    parser.add_argument("--policies", nargs="*", default=list(POLICIES), help="registry names (default: the paper's six)")
    parser.add_argument("--all-columns", action="store_true", help="hash every recorded column's bytes")
    args = parser.parse_args()
    names = args.traces or [n for n in catalog.list_traces() if n.startswith("openb-")]
    for name in names:
        nodes, workload = catalog.load_trace(name, data_dir=args.data_dir)
        for policy in args.policies:
            result = run_experiment(nodes, workload, ExperimentConfig(policy=policy, seed=args.seed, rng="go"))
            print(f"{name} {policy} {len(result.events)} {digest(result.events, args.all_columns)}", flush=True)


if __name__ == "__main__":
    main()
