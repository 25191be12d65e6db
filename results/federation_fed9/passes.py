"""Count the throttle's pass checks by head state, on the first DAYS of the DLRM year (diagnostic, fed9)."""
import sys
from collections import Counter
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import argparse
from pathlib import Path
from federation_year import dlrm_year
from quasched.federation.engine import run_federation
from quasched.federation.throttle import ThrottleDisplacement

counts: Counter = Counter()

class Counting(ThrottleDisplacement):
    def admits(self, c, job, now):
        v = self.view
        head = int(v.head[c])
        ok = super().admits(c, job, now)
        if head < 0 or head == job:
            return ok
        late = v.latest_start[head] < now
        easy = now + v.duration[job] <= v.latest_start[head]
        counts[("late" if late else "on time", "allowed" if ok else "refused", "easy would allow" if easy else "easy would refuse")] += 1
        return ok

args = argparse.Namespace(data_dir=Path(sys.argv[2]), carbon_dir=Path(sys.argv[3]), policy="fgd",
                          seed=42, headroom=1.2, days=float(sys.argv[1]))
sc = dlrm_year(args)
run = run_federation(sc, Counting(), "fgd", 42)
total = sum(counts.values())
print(f"{args.days:g} days, {total:,} checks (passes and retries), replay CPU {run.cpu_s:.1f} s")
for k, n in sorted(counts.items()):
    print(f"  {' / '.join(k)}: {n:,} ({100 * n / total:.1f} %)")
