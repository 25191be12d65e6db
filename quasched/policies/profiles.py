"""How each registered policy is built (:mod:`.registry` holds the table of names, labels and
parameters): a one-plugin profile, FGD on either scale, FGD + a headroom term and our compositions
on it (``ours``, ``ourshome``, ``oursbalance``, ``oursshare``, ``oursrare``, ``oursguard``), PWR and its
mixes (``pwrfgd``, ``pwrheadroom``, the ``pwrbalance`` family), ``learned`` and ``healthfgd``. Plugins
are imported when a policy is built, never at import (``--help`` reads the registry without NumPy)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from quasched.metrics.typical import TypicalPods
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


def fgd_headroom(typical: TypicalPods, scale: str, beta: float, learn: bool, name: str,
                  term: str = "headroom:HeadroomScore", extra: tuple[tuple[str, float], ...] = (),
                  term_typical: TypicalPods | None = None) -> Policy:
    """FGD on ``scale`` + ``beta`` x the headroom ``term`` (on ``term_typical``, else the typical pods)
    (+ ``extra`` plugins ``(module:Class, weight)`` built from the typical pods); the best combined device,
    tightest on ties."""
    from quasched.policies.framework import Policy

    plugins = [(plugin("fgd:FGD")(typical, scale), 1.0), (plugin(term)(term_typical or typical, learn), beta)]
    return Policy(plugins + [(plugin(path)(typical), weight) for path, weight in extra],
                  "best-score-tightest", name=name)


def headroom(typical: TypicalPods, beta: float = 2.0, learn: bool = True) -> Policy:
    return fgd_headroom(typical, "linear", beta, learn, "headroom")


def ours(typical: TypicalPods, beta: float = 8.0, learn: bool = True) -> Policy:
    """Ours: FGD on its own (sigmoid, truncated) scale + ``beta`` x the headroom term (linear).

    ``score = trunc(100 σ(ΔF / 1000)) + β (50 + ΔH / (160 N))``: FGD's integer plateaus keep
    its rank tie-break (packing); the headroom term orders nodes within and across them.
    """
    return fgd_headroom(typical, "sigmoid", beta, learn, "ours")


def ourshome(typical: TypicalPods, beta: float = 8.0, learn: bool = True) -> Policy:
    """``ours`` with the headroom term's shapes weighted by 1 / the GPU share of their homes
    (:mod:`quasched.policies.home_headroom`): ``trunc(100 σ(ΔF / 1000)) + β (50 + ΔH_home / (160 N))``."""
    return fgd_headroom(typical, "sigmoid", beta, learn, "ourshome", "home_headroom:HomeHeadroomScore")


def oursbalance(typical: TypicalPods, beta: float = 8.0, gamma: float = 16.0, learn: bool = True) -> Policy:
    """``ourshome`` + ``gamma`` x the CPU-starved GPUs a placement adds (:mod:`quasched.policies.cpu_balance`):
    ``trunc(100 σ(ΔF / 1000)) + β (50 + ΔH_home / (160 N)) + γ (50 − ΔS / 160)``."""
    return fgd_headroom(typical, "sigmoid", beta, learn, "oursbalance", "home_headroom:HomeHeadroomScore",
                         (("cpu_balance:CpuBalanceScore", gamma),))


def oursshare(typical: TypicalPods, beta: float = 8.0, gamma: float = 16.0, learn: bool = True) -> Policy:
    """``oursbalance`` with each device's free milli priced by the typical pods that fit in it
    (:mod:`quasched.policies.device_balance`): ``trunc(100 σ(ΔF / 1000)) + β (50 + ΔH_home / (160 N)) + γ (50 − ΔS_dev / 160)``."""
    return fgd_headroom(typical, "sigmoid", beta, learn, "oursshare", "home_headroom:HomeHeadroomScore",
                         (("device_balance:DeviceBalanceScore", gamma),))


def oursrare(typical: TypicalPods, beta: float = 8.0, gamma: float = 16.0) -> Policy:
    """``oursshare`` whose headroom term counts, from the start and for good, the typical pods *and* the rare
    heavy shapes (:attr:`TypicalPods.heavy`: with them 99 % of the GPU demand) instead of learning the mix
    online, so the only nodes that hold a rare 8-GPU, 120-core pod are not given to 1-GPU pods early."""
    return fgd_headroom(typical, "sigmoid", beta, False, "oursrare", "home_headroom:HomeHeadroomScore",
                         (("device_balance:DeviceBalanceScore", gamma),), typical.with_heavy())


def oursguard(typical: TypicalPods, beta: float = 8.0, gamma: float = 16.0, delta: float = 16.0) -> Policy:
    """``oursrare`` + ``delta`` x the future pods a placement is expected to turn away by breaking the last
    homes of a shape (:mod:`quasched.policies.last_homes`, Littlewood's rule):
    ``... + δ (50 − E / 160)``."""
    from quasched.policies.framework import Policy

    rare = oursrare(typical, beta, gamma)
    guard = plugin("last_homes:LastHomesScore")(typical.with_heavy())
    return Policy(rare.plugins + [(guard, delta)], rare.device_rule, name="oursguard")


#: PWR's weight in a PWR+FGD mix is out of this total; FGD gets the rest (the paper's 50/950 ... 500/500)
MIX_TOTAL = 1000


def pwr(typical: TypicalPods, mode: str = "step") -> Policy:
    from quasched.policies.framework import Policy

    return Policy([(plugin("pwr:PWR")(mode), 1.0)], "tightest", name="pwr")


def pwrfgd(typical: TypicalPods, pwr: int = 100, mode: str = "step") -> Policy:
    """``pwr`` × PWR + (1000 − ``pwr``) × FGD (sigmoid scale); FGD picks a sharing pod's device."""
    from quasched.policies.framework import Policy

    if pwr > MIX_TOTAL:
        raise ValueError(f"parameter pwr={pwr} must be at most {MIX_TOTAL} (FGD gets {MIX_TOTAL} - pwr)")
    return Policy([(plugin("pwr:PWR")(mode), float(pwr)), (plugin("fgd:FGD")(typical, "sigmoid"), float(MIX_TOTAL - pwr))],
                  "best-score", name="pwrfgd")


def pwrheadroom(typical: TypicalPods, gpu: float = 1.0, cpu: float = 0.001, until: float = 80.0, beta: float = 2.0,
                 mode: str = "step") -> Policy:
    """Ours (experimental): Headroom + ``gpu`` x PWR's GPU term + ``cpu`` x its CPU term, both until ``until`` %."""
    from quasched.policies.framework import Policy

    pwr = plugin("pwr:PWR")
    return Policy([(plugin("fgd:FGD")(typical, "linear"), 1.0), (plugin("headroom:HeadroomScore")(typical, True), beta),
                   (pwr(mode, until=until, terms="gpu"), gpu), (pwr(mode, until=until, terms="cpu"), cpu)],
                  "best-score-tightest", name="pwrheadroom")


def power_balance(term: str, name: str) -> Callable[..., Policy]:
    """Builder of ``name``: ``oursbalance`` + ``scarce`` x the scarce-GPU linear watts ``term`` (``module:Class``)
    + ``gpu`` x PWR's GPU term + ``cpu`` x its CPU term (step model) [+ ``cores`` x the working-core term
    (:mod:`quasched.policies.pwr_cores`) if ``cores`` > 0], all until ``until`` %."""
    def build(typical: TypicalPods, scarce: float = 16.0, gpu: float = 1.0, cpu: float = 0.001, until: float = 80.0,
              horizon: float = 20.0, kappa: float = 0.9, rounding: float = 0.5, beta: float = 8.0,
              gamma: float = 16.0, cores: float = 0.0) -> Policy:
        from quasched.policies.framework import Policy

        pwr = plugin("pwr:PWR")
        power = [(plugin(term)(typical, horizon, kappa, rounding, until=until), scarce),
                 (pwr("step", until=until, terms="gpu"), gpu), (pwr("step", until=until, terms="cpu"), cpu)]
        if cores > 0:
            power.append((plugin("pwr_cores:WorkingCores")(until=until), cores))
        return Policy(oursbalance(typical, beta, gamma).plugins + power, "best-score-tightest", name=name)
    return build


def learned(typical: TypicalPods, weights: str = "") -> Policy:
    """The linear score of a checkpoint's weights (:mod:`quasched.policies.learned`); "" = the packaged one."""
    learned = import_module("quasched.policies.learned")
    return learned.learned_policy(typical, learned.load_weights(weights or learned.PACKAGED))


def healthfgd(typical: TypicalPods, weight: float = 2.0, half_life: float = 168.0, flaky: float = 0.0) -> Policy:
    """Ours: FGD (sigmoid scale) + ``weight`` x Health (nodes with recent GPU errors score less) + ``flaky`` x the
    flaky-node posterior (:mod:`quasched.policies.flaky`)."""
    from quasched.policies.framework import Policy

    return Policy([(plugin("fgd:FGD")(typical, "sigmoid"), 1.0), (plugin("health:HealthScore")(half_life), weight),
                   (plugin("flaky:FlakyPosterior")(), flaky)], "best-score", name="healthfgd")
