"""Counts and amounts as the terminal shows them: a noun agreeing with its number, whole counts without decimals."""

from __future__ import annotations


def counted(n: float, noun: str, plural: str = "") -> str:
    """``n`` and ``noun`` in agreement: ``1 node``, ``3 nodes``, ``1,000 pods``, ``2 policies`` (``plural`` for a
    noun that does not take an ``s``); a whole float is shown without decimals (``3.0`` is ``3``), a share as is."""
    number = f"{n:,.0f}" if float(n).is_integer() else f"{n:,g}"
    return f"{number} {noun if n == 1 else plural or noun + 's'}"


def quota_text(quota: dict[str, float]) -> str:
    """A queue's quota as ``A100: 8 GPUs, *: 0.5 GPUs`` (``unlimited`` when it has none)."""
    return ", ".join(f"{model}: {counted(gpus, 'GPU')}" for model, gpus in quota.items()) or "unlimited"
