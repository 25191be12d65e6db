"""How each registered policy is built (:mod:`.registry` holds the table of names, labels and
parameters): a one-plugin profile, FGD on either scale, ``guard``, PWR and its FGD mixes, ``power``,
``learned`` and ``health``. Plugins are imported when a policy is built, never at import (``--help``
reads the registry without NumPy)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from quasched.metrics.typical import TypicalPods
    from quasched.policies.base import ScorePlugin
    from quasched.policies.framework import Policy


def plugin(path: str) -> type:
    module, _, name = path.partition(":")
    return getattr(import_module(f"quasched.policies.{module}"), name)


def single(path: str, device_rule: str = "tightest") -> Callable[..., Policy]:
    """Builder of a one-plugin policy; ``path`` = ``module:Class`` under quasched.policies."""
    def build(typical: TypicalPods) -> Policy:
        from quasched.policies.framework import Policy

        return Policy([(plugin(path)(), 1.0)], device_rule)  # type: ignore[arg-type]
    return build


def fgd(typical: TypicalPods, scale: str = "sigmoid") -> Policy:
    from quasched.policies.framework import Policy

    return Policy([(plugin("fgd:FGD")(typical, scale), 1.0)], "best-score", name="fgd")


def on_typical(typical: TypicalPods, build: Callable[[TypicalPods], ScorePlugin]) -> ScorePlugin:
    """``build(typical)``; on typical pods learned online (a ``TypicalWindow``, as in a service), a plugin that
    ``build`` makes again whenever they change (:mod:`.following`)."""
    from quasched.metrics.typical import TypicalWindow

    return plugin("following:FollowWindow")(build, typical) if isinstance(typical, TypicalWindow) else build(typical)


def guard(typical: TypicalPods, beta: float = 8.0, gamma: float = 16.0, delta: float = 16.0) -> Policy:
    """FGD on its own (sigmoid, truncated) scale + ``beta`` x the headroom destroyed, fixed for the typical pods
    and the rare heavy shapes (:attr:`TypicalPods.heavy`), each shape weighted by 1 / the GPU share of the nodes
    that can hold it (:mod:`.home_headroom`) + ``gamma`` x the GPUs a placement leaves short of the CPU its device
    can serve (:mod:`.device_balance`) + ``delta`` x the pods it is expected to turn away by breaking the last homes
    of a shape (:mod:`.last_homes`, Littlewood's rule); the best combined device, tightest on ties:
    ``trunc(100 σ(ΔF / 1000)) + β (50 + ΔH / (160 N)) + γ (50 − ΔS / 160) + δ (50 − E / 160)``."""
    from quasched.policies.framework import Policy

    home, balance, last = (plugin(p) for p in ("home_headroom:HomeHeadroomScore", "device_balance:DeviceBalanceScore",
                                               "last_homes:LastHomesScore"))
    return Policy([(plugin("fgd:FGD")(typical, "sigmoid"), 1.0),
                   (on_typical(typical, lambda t: home(t.with_heavy(), False)), beta),
                   (on_typical(typical, balance), gamma),
                   (on_typical(typical, lambda t: last(t.with_heavy())), delta)], "best-score-tightest", name="guard")


#: a PWR+FGD mix splits this total weight (the PWR paper's 50/950 ... 500/500)
MIX_TOTAL = 1000


def pwr(typical: TypicalPods, mode: str = "step", fgd: int = 0) -> Policy:
    """PWR (the least modelled power added), or with ``fgd`` > 0 the PWR paper's mix
    (``MIX_TOTAL`` − ``fgd``) x PWR + ``fgd`` x FGD (sigmoid scale), FGD picking a sharing pod's device."""
    from quasched.policies.framework import Policy

    if not fgd:
        return Policy([(plugin("pwr:PWR")(mode), 1.0)], "tightest", name="pwr")
    return Policy([(plugin("pwr:PWR")(mode), float(MIX_TOTAL - fgd)), (plugin("fgd:FGD")(typical, "sigmoid"), float(fgd))],
                  "best-score", name="pwr")


def power(typical: TypicalPods, scarce: float = 16.0, gpu: float = 1.0, cpu: float = 0.001, until: float = 80.0,
          horizon: float = 20.0, kappa: float = 0.9, rounding: float = 0.5, beta: float = 8.0,
          gamma: float = 16.0) -> Policy:
    """FGD (sigmoid scale) + ``beta`` x the headroom destroyed, learned online and weighted by home
    (:mod:`.home_headroom`) + ``gamma`` x the CPU-starved GPUs a placement adds (:mod:`.cpu_balance`) + ``scarce`` x
    the linear watts with cheap GPUs priced by how much of them the whole-GPU pods fill (:mod:`.pwr_fill`)
    + ``gpu`` x PWR's GPU term + ``cpu`` x its CPU term (step model), the power terms until ``until`` % of the GPUs
    are allocated."""
    from quasched.policies.framework import Policy

    pwr, home, fill = (plugin(p) for p in ("pwr:PWR", "home_headroom:HomeHeadroomScore", "pwr_fill:FillPower"))
    return Policy([(plugin("fgd:FGD")(typical, "sigmoid"), 1.0),
                   (on_typical(typical, lambda t: home(t, True)), beta),
                   (on_typical(typical, plugin("cpu_balance:CpuBalanceScore")), gamma),
                   (on_typical(typical, lambda t: fill(t, horizon, kappa, rounding, until=until)), scarce),
                   (pwr("step", until=until, terms="gpu"), gpu), (pwr("step", until=until, terms="cpu"), cpu)],
                  "best-score-tightest", name="power")


def learned(typical: TypicalPods, weights: str = "") -> Policy:
    """The linear score of a checkpoint's weights (:mod:`quasched.policies.learned`); "" = the packaged one."""
    learned = import_module("quasched.policies.learned")
    return learned.learned_policy(typical, learned.load_weights(weights or learned.PACKAGED))


def health(typical: TypicalPods, weight: float = 2.0, half_life: float = 168.0, flaky: float = 0.0) -> Policy:
    """FGD (sigmoid scale) + ``weight`` x Health (nodes with recent GPU errors score less) + ``flaky`` x the
    flaky-node posterior (:mod:`quasched.policies.flaky`)."""
    from quasched.policies.framework import Policy

    return Policy([(plugin("fgd:FGD")(typical, "sigmoid"), 1.0), (plugin("health:HealthScore")(half_life), weight),
                   (plugin("flaky:FlakyPosterior")(), flaky)], "best-score", name="health")
