"""Benchmark: every batch solver on Qua's two instances, 10..100 machines (``quasched batch``).

Usage: python benchmarks/batch_qua.py [quasched batch options], e.g.
    python benchmarks/batch_qua.py --data-dir ../shared/traces --rules qua --out results/batch-qua
"""

import typer

from quasched.cli.batch import batch

if __name__ == "__main__":
    typer.run(batch)
