"""The policy registry: one name per policy, what it is for, its labels, typed parameters and how to build it
(the builders are in :mod:`.profiles`).

A policy spec is a name with optional parameters, ``guard:delta=8`` or ``fgd:scale=linear``; a list is
comma-separated (``fgd,guard:delta=8,bestfit``) and ``all`` means the six policies of the FGD paper. The
recommended ones: ``guard`` (allocation), ``power`` (power) and ``health`` (GPU failures); ``quasched policies``
lists them all. Names are the only identifiers used in configs, results and files; tables and plots show
:attr:`PolicyInfo.label`; only the FGD artifact's CSV layouts (:mod:`quasched.compat.artifact`) use
:attr:`PolicyInfo.artifact_label`."""

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
    #: what to choose it for (``quasched policies``)
    purpose: str = ""


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
        """Display label: ``FGD``, or ``Guard(delta=8)`` when a parameter differs from its default."""
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


#: ``guard``'s packing terms (``power`` shares the first two)
_PACKING = (Param("beta", float, 8.0, "weight of the headroom term", minimum=0.0),
            Param("gamma", float, 16.0, "weight of the CPU-per-GPU balance term", minimum=0.0))


def _mix_total(fgd: int) -> None:
    if fgd > profiles.MIX_TOTAL:
        raise ValueError(f"must be at most {profiles.MIX_TOTAL} (PWR gets {profiles.MIX_TOTAL} - fgd)")


def _register_builtins() -> None:
    paper = "baseline (FGD paper)"
    for info in (
        PolicyInfo("random", "Random", "a uniformly random feasible node and device",
                   profiles.single("random_score:RandomScore", "uniform"), artifact_label="01-Random", paper=True,
                   purpose=paper),
        PolicyInfo("dotprod", "DotProd", "align free and requested CPU/GPU (Tetris)",
                   profiles.single("dot_product:DotProduct"), artifact_label="02-DotProd", paper=True, purpose=paper),
        PolicyInfo("gpuclustering", "GpuClustering", "keep pods of one GPU shape together",
                   profiles.single("gpu_clustering:GpuClustering"), artifact_label="03-GpuClustering", paper=True,
                   purpose=paper),
        PolicyInfo("gpupacking", "GpuPacking", "fill used GPUs, then used nodes, then idle ones",
                   profiles.single("gpu_packing:GpuPacking"), artifact_label="04-GpuPacking", paper=True,
                   purpose=paper),
        PolicyInfo("bestfit", "BestFit", "least CPU and GPU left after placing", profiles.single("best_fit:BestFit"),
                   artifact_label="05-BestFit", paper=True, purpose=paper),
        PolicyInfo("fgd", "FGD", "Fragmentation Gradient Descent (ATC'23): least growth of the GPU fragmentation "
                   "the typical pods see", profiles.fgd,
                   (Param("scale", str, "sigmoid", "score normalisation", ("sigmoid", "linear")),),
                   artifact_label="06-FGD", paper=True, purpose=paper),
        PolicyInfo("firstfit", "FirstFit", "the first feasible node in cluster order",
                   profiles.single("first_fit:FirstFit"), artifact_label="07-FirstFit", purpose="baseline"),
        PolicyInfo("guard", "Guard",
                   "FGD that keeps room for the pods still to come: headroom for the typical and the rare heavy "
                   "shapes, CPU per free GPU, and no breaking the last nodes that can hold a shape; +0.38 to +1.36 "
                   "points of GPU allocation over FGD (170 of 170 paired runs, 17 traces)",
                   profiles.guard, (*_PACKING, Param("delta", float, 16.0, "weight of the last-homes term", minimum=0.0)),
                   artifact_label="Guard", purpose="allocation (recommended)"),
        PolicyInfo("power", "Power",
                   "FGD with headroom and CPU balance, preferring GPU models of small idle-to-full power swing while "
                   "they are plentiful; 13.9 % less modelled power than FGD at +0.46 points of allocation "
                   "(openb-default)", profiles.power,
                   (Param("scarce", float, 16.0, "weight of the scarce-GPU power term", minimum=0.0),
                    Param("gpu", float, 1.0, "weight of PWR's GPU power term (step model)", minimum=0.0),
                    Param("cpu", float, 0.001, "weight of PWR's CPU socket term (step model)", minimum=0.0),
                    Param("until", float, 80.0, "power terms off from this GPU allocation (%)", minimum=0.0),
                    Param("horizon", float, 20.0, "% of the unallocated GPUs a cheap model's scarcity looks ahead",
                          minimum=0.0),
                    Param("kappa", float, 0.9, "share of the swing difference charged as scarcity", minimum=0.0),
                    Param("rounding", float, 0.5, "weight of the linear CPU watts (working-core rounding) in the "
                          "scarce term", minimum=0.0), *_PACKING),
                   artifact_label="Power", purpose="power (recommended)"),
        PolicyInfo("health", "Health",
                   "FGD preferring nodes with fewer recent GPU errors (flaky: and fewer likely flaky ones); with "
                   "drains and migration 25.1 % fewer lost GPU-hours than FGD (dlrm-2025)", profiles.health,
                   (Param("weight", float, 2.0, "weight of the health term", minimum=0.0),
                    Param("half_life", float, 168.0, "hours for an error's weight to halve", minimum=1e-3),
                    Param("flaky", float, 0.0, "weight of the flaky-node posterior term (the pod's devices x GPUs x "
                          "P(flaky | the node's errors); 0 = off)", minimum=0.0)),
                   artifact_label="Health", purpose="health (recommended)"),
        PolicyInfo("pwr", "PWR",
                   "least modelled power added (CCGrid'25); fgd=900 is the paper's PWR 100 + FGD 900 mix; "
                   "14.2 % less power than FGD at -4.73 points of allocation (the mix: 13.6 %, -2.35)", profiles.pwr,
                   (Param("mode", str, "step", "power model of the PWR term", ("step", "linear")),
                    Param("fgd", int, 0, f"FGD's weight out of {profiles.MIX_TOTAL} in a PWR+FGD mix (0: PWR alone)",
                          minimum=0, check=_mix_total)),
                   artifact_label="PWR", purpose="power baseline (PWR paper)"),
        PolicyInfo("learned", "Learned",
                   "weighted sum of six plugins' scores, weights trained in the simulator; beats FGD on 4 of 6 "
                   "held-out traces, loses to guard on 5", profiles.learned,
                   (Param("weights", str, "", "checkpoint JSON (default: the packaged one)",
                          check=lambda path: import_module("quasched.policies.learned").load_weights(path)),),
                   artifact_label="Learned", purpose="research"),
    ):
        REGISTRY.register(info)


_register_builtins()
#: The six policies of the FGD paper, in its order.
PAPER_POLICIES = tuple(info.name for info in REGISTRY.entries() if info.paper)
