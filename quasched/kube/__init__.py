"""Kubernetes integration: the kube-scheduler extender, the pod/node convention and the cluster sync."""

import sys


def log(message: str) -> None:
    """One line on stderr prefixed ``quasched kube:``."""
    print(f"quasched kube: {message}", file=sys.stderr, flush=True)
