"""The policy registry: one name per policy, its labels, typed parameters and how to build it
(the builders are in :mod:`.profiles`).

A policy spec is a name with optional parameters, ``headroom:beta=2`` or
``fgd:scale=linear``; a list is comma-separated (``fgd,headroom:beta=2,bestfit``)
and ``all`` means the six policies of the FGD paper. Compositions: ``headroom``,
``pwrfgd:pwr=100`` (100 × PWR + 900 × FGD, the PWR paper's mixes), ``pwrheadroom``, ``pwrbalance`` and
``healthfgd`` (FGD + weight × the health term of :mod:`quasched.policies.health`). Names are the only
identifiers used in configs, results and files; tables and plots show
:attr:`PolicyInfo.label`; only the FGD artifact's CSV layouts
(:mod:`quasched.compat.artifact`) use :attr:`PolicyInfo.artifact_label`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable

from quasched.params import Param, Registry, defaults
from quasched.policies import profiles

if TYPE_CHECKING:  # the registry is read by ``--help``: no NumPy at import
    from quasched.metrics.typical import TypicalPods
    from quasched.policies.framework import Policy

@dataclass(frozen=True)
class PolicyInfo:
    """Registry entry: names, parameters and the builder ``build(typical, **params) -> Policy``."""

    name: str
    label: str
    summary: str
    build: Callable[..., Policy]
    params: tuple[Param, ...] = ()
    artifact_label: str = ""
    paper: bool = False


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy with parameter values (defaults filled in)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def info(self) -> PolicyInfo:
        return REGISTRY.get(self.name)

    @property
    def label(self) -> str:
        """Display label: ``FGD``, or ``Headroom(beta=4)`` when a parameter differs from its default."""
        changed = [f"{p.name}={self.params[p.name]}" for p in self.info.params if self.params[p.name] != p.default]
        return self.info.label + (f"({', '.join(changed)})" if changed else "")

    def __str__(self) -> str:
        changed = [f"{p.name}={self.params[p.name]}" for p in self.info.params if self.params[p.name] != p.default]
        return self.name + (":" + ",".join(changed) if changed else "")

    def build(self, typical: TypicalPods) -> Policy:
        return self.info.build(typical, **self.params)


REGISTRY: Registry[PolicyInfo] = Registry("policy")


def parse_spec(text: str) -> PolicySpec:
    """One spec ``name[:param=value[,param=value...]]`` → :class:`PolicySpec` (ValueError if invalid)."""
    info, params = REGISTRY.parse(text)
    return PolicySpec(info.name, params)


def parse_specs(text: str) -> list[PolicySpec]:
    """``all``, or comma-separated specs; a parameter list continues after ``:`` until the next name."""
    if text.strip() == "all":
        return [PolicySpec(n, defaults(REGISTRY.get(n).params)) for n in PAPER_POLICIES]
    specs: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if specs and "=" in part and ":" not in part and part.partition("=")[0] not in REGISTRY:
            specs[-1] += "," + part  # another parameter of the previous spec
        else:
            specs.append(part)
    if not specs:
        raise ValueError(f"no policy in {text!r}")
    return [parse_spec(s) for s in specs]


def make_policy(spec: str | PolicySpec, typical: TypicalPods) -> Policy:
    """A fresh policy from a spec string or :class:`PolicySpec`."""
    return (parse_spec(spec) if isinstance(spec, str) else spec).build(typical)


def display_label(spec: str) -> str:
    """Label of a policy spec for tables and plots (``fgd`` → ``FGD``)."""
    return parse_spec(spec).label


def policy_names() -> tuple[str, ...]:
    """Names of all registered policies, in registry order."""
    return REGISTRY.names()


def describe() -> str:
    """One line per registered policy with its parameters (for ``--help``)."""
    lines = []
    for info in REGISTRY.entries():
        params = ", ".join(f"{p.name}={p.default}" for p in info.params)
        lines.append(f"{info.name}{f' [{params}]' if params else ''}: {info.summary}")
    return "; ".join(lines)


#: ``oursbalance`` and ``oursshare``: headroom weight, balance weight, learning
_BALANCE_PARAMS = (Param("beta", float, 8.0, "weight of the headroom term", minimum=0.0),
                   Param("gamma", float, 16.0, "weight of the (device) CPU-balance term", minimum=0.0),
                   Param("learn", bool, True, "learn the pod mix online"))
_POWER_MODE = Param("mode", str, "step", "power model of the PWR term", ("step", "linear"))
#: ``pwrbalance`` and ``pwrbalance2``
_POWER_BALANCE_PARAMS = (
    Param("scarce", float, 16.0, "weight of the scarce-GPU power term", minimum=0.0),
    Param("gpu", float, 1.0, "weight of PWR's GPU power term (step model)", minimum=0.0),
    Param("cpu", float, 0.001, "weight of PWR's CPU socket term (step model)", minimum=0.0),
    Param("until", float, 80.0, "power terms off from this GPU allocation (%)", minimum=0.0),
    Param("horizon", float, 20.0, "% of the unallocated GPUs a cheap model's scarcity looks ahead", minimum=0.0),
    Param("kappa", float, 0.9, "share of the swing difference charged as scarcity", minimum=0.0),
    Param("rounding", float, 0.5, "weight of the linear CPU watts (working-core rounding) in the scarce term",
          minimum=0.0),
    *_BALANCE_PARAMS[:2])


def _register_builtins() -> None:
    for info in (
        PolicyInfo("random", "Random", "a uniformly random feasible node and device",
                   profiles.single("random_score:RandomScore", "uniform"), artifact_label="01-Random", paper=True),
        PolicyInfo("dotprod", "DotProd", "align free and requested CPU/GPU (Tetris)",
                   profiles.single("dot_product:DotProduct"), artifact_label="02-DotProd", paper=True),
        PolicyInfo("gpuclustering", "GpuClustering", "keep pods of one GPU shape together",
                   profiles.single("gpu_clustering:GpuClustering"), artifact_label="03-GpuClustering", paper=True),
        PolicyInfo("gpupacking", "GpuPacking", "fill used GPUs, then used nodes, then idle ones",
                   profiles.single("gpu_packing:GpuPacking"), artifact_label="04-GpuPacking", paper=True),
        PolicyInfo("bestfit", "BestFit", "least CPU and GPU left after placing", profiles.single("best_fit:BestFit"),
                   artifact_label="05-BestFit", paper=True),
        PolicyInfo("fgd", "FGD", "Fragmentation Gradient Descent (ATC'23)", profiles.fgd,
                   (Param("scale", str, "sigmoid", "score normalisation", ("sigmoid", "linear")),),
                   artifact_label="06-FGD", paper=True),
        PolicyInfo("firstfit", "FirstFit", "the first feasible node in cluster order",
                   profiles.single("first_fit:FirstFit"), artifact_label="07-FirstFit"),
        PolicyInfo("headroom", "Headroom", "ours: FGD + beta x typical-pod headroom destroyed", profiles.headroom,
                   (Param("beta", float, 2.0, "weight of the headroom term", minimum=0.0),
                    Param("learn", bool, True, "learn the pod mix online")), artifact_label="Headroom"),
        PolicyInfo("ours", "Ours", "ours: FGD (its sigmoid scale) + beta x typical-pod headroom destroyed",
                   profiles.ours,
                   (Param("beta", float, 8.0, "weight of the headroom term", minimum=0.0),
                    Param("learn", bool, True, "learn the pod mix online")), artifact_label="Ours"),
        PolicyInfo("ourshome", "Ours+Home",
                   "ours, each shape's headroom weighted by 1 / the GPU share of the nodes that can hold it",
                   profiles.ourshome,
                   (Param("beta", float, 8.0, "weight of the headroom term", minimum=0.0),
                    Param("learn", bool, True, "learn the pod mix online")), artifact_label="Ours+Home"),
        PolicyInfo("oursbalance", "Ours+Balance",
                   "ourshome + gamma x the GPUs a placement leaves short of the typical pods' CPU per GPU",
                   profiles.oursbalance, _BALANCE_PARAMS, artifact_label="Ours+Balance"),
        PolicyInfo("oursshare", "Ours+Share",
                   "oursbalance with each device's free GPU priced by the CPU of the typical pods that fit in it",
                   profiles.oursshare, _BALANCE_PARAMS, artifact_label="Ours+Share"),
        PolicyInfo("oursrare", "Ours+Rare",
                   "oursshare with the headroom kept, fixed, for the typical pods and the rare heavy shapes "
                   "(99 % of the GPU demand) instead of learned online",
                   profiles.oursrare, _BALANCE_PARAMS[:2], artifact_label="Ours+Rare"),
        PolicyInfo("oursguard", "Ours+Guard",
                   "oursrare + delta x the pods a placement is expected to turn away by breaking the last nodes "
                   "that can hold a shape (Littlewood's protection rule)",
                   profiles.oursguard, (*_BALANCE_PARAMS[:2],
                                Param("delta", float, 16.0, "weight of the last-homes term", minimum=0.0)),
                   artifact_label="Ours+Guard"),
        PolicyInfo("pwr", "PWR", "least modelled power added (CCGrid'25)", profiles.pwr, (_POWER_MODE,),
                   artifact_label="PWR"),
        PolicyInfo("pwrfgd", "PWR+FGD", "pwr/1000 x PWR + the rest x FGD (CCGrid'25 mixes)", profiles.pwrfgd,
                   (Param("pwr", int, 100, f"PWR's weight out of {profiles.MIX_TOTAL}", minimum=0), _POWER_MODE),
                   artifact_label="PWR+FGD"),
        PolicyInfo("pwrheadroom", "PWR+Headroom",
                   "ours: Headroom + PWR's GPU term (+ its CPU term as a tie-break) while GPU allocation < until %",
                   profiles.pwrheadroom, (Param("gpu", float, 1.0, "weight of PWR's GPU power term", minimum=0.0),
                                  Param("cpu", float, 0.001, "weight of PWR's CPU socket term", minimum=0.0),
                                  Param("until", float, 80.0, "PWR terms off from this GPU allocation (%)", minimum=0.0),
                                  Param("beta", float, 2.0, "weight of the headroom term", minimum=0.0), _POWER_MODE),
                   artifact_label="PWR+Headroom"),
        PolicyInfo("pwrbalance", "PWR+Balance",
                   "ours: oursbalance + scarce x the linear watts with cheap GPUs priced as scarce + PWR's terms, "
                   "while GPU allocation < until %", profiles.power_balance("pwr_scarce:ScarcePower", "pwrbalance"),
                   _POWER_BALANCE_PARAMS, artifact_label="PWR+Balance"),
        PolicyInfo("pwrbalance2", "PWR+Balance2",
                   "ours: pwrbalance with the cheap GPUs' scarcity price scaled by how much of them the whole-GPU "
                   "pods fill (no on/off switch)", profiles.power_balance("pwr_fill:FillPower", "pwrbalance2"),
                   _POWER_BALANCE_PARAMS, artifact_label="PWR+Balance2"),
        PolicyInfo("pwrbalance3", "PWR+Balance3",
                   "ours: pwrbalance2 + cores x the working-core term (among nodes of equal GPU and socket watts, the "
                   "fewest CPU cores a pod sets working)",
                   profiles.power_balance("pwr_fill:FillPower", "pwrbalance3"),
                   (*_POWER_BALANCE_PARAMS, Param("cores", float, 0.2, "weight of the working-core term", minimum=0.0)),
                   artifact_label="PWR+Balance3"),
        PolicyInfo("learned", "Learned", "ours: weighted sum of six plugins' scores, weights trained in the simulator",
                   profiles.learned, (Param("weights", str, "", "checkpoint JSON (default: the packaged one)",
                                    check=lambda path: import_module("quasched.policies.learned").load_weights(path)),),
                   artifact_label="Learned"),
        PolicyInfo("healthfgd", "Health+FGD", "ours: FGD + weight x health (nodes with fewer recent GPU errors score more)",
                   profiles.healthfgd, (Param("weight", float, 2.0, "weight of the health term", minimum=0.0),
                                Param("half_life", float, 168.0, "hours for an error's weight to halve",
                                      minimum=1e-3),
                                Param("flaky", float, 0.0, "weight of the flaky-node posterior term (the pod's "
                                      "devices x GPUs x P(flaky | the node's errors); 0 = off)", minimum=0.0)),
                   artifact_label="Health+FGD"),
    ):
        REGISTRY.register(info)


_register_builtins()
#: The six policies of the FGD paper, in its order.
PAPER_POLICIES = tuple(info.name for info in REGISTRY.entries() if info.paper)
