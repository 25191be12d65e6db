"""TypicalPods.heavy (rare shapes that carry GPU demand) and the policy that keeps room for them, by hand."""

from __future__ import annotations

import numpy as np
from builders import nodes, pod
from test_policy_headroom import scores

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.policies import Policy, make_policy
from quasched.policies.home_headroom import HomeHeadroomScore

ONE, HALF, EIGHT = (12000, 1000, 1, ""), (2000, 500, 1, ""), (120000, 1000, 8, "")


def test_heavy_shapes_complete_the_gpu_demand_cover():
    # 90 × 1 GPU, 5 × 0.5 GPU, 1 × 8 GPUs: the top 95 % of pods is 90 + 5 (98.96 %), the 8-GPU pod is left out.
    # GPU demand 90000 + 8000 + 2500 = 100500; 99 % = 99495 needs the 90000 and the 8000 (98000) and then 2500.
    typical = TypicalPods.from_shapes([ONE] * 90 + [HALF] * 5 + [EIGHT], threshold=95.0)
    assert typical.shapes == (ONE, HALF)
    assert typical.heavy == ((EIGHT, 1),)
    both = typical.with_heavy()
    assert both.shapes == (ONE, HALF, EIGHT) and both.counts == (90, 5, 1)
    np.testing.assert_allclose(both.freq, np.array([90, 5, 1]) / 96)


def test_no_heavy_shape_when_the_typical_pods_already_carry_the_demand():
    assert TypicalPods.from_shapes([ONE] * 99 + [HALF], threshold=100.0).heavy == ()


def test_the_heavy_shapes_keep_the_only_home_of_the_8_gpu_pod():
    """A 16-core 2-GPU node and a 128-core 8-GPU node; only the second holds the 120-core 8-GPU pod.
    A 12-core 1-GPU pod destroys one 1-GPU copy on either (and the same 0.5-GPU copies), so the headroom
    of the typical pods alone is a tie; with the heavy shapes the 8-GPU copy it would also destroy counts."""
    typical = TypicalPods.from_shapes([ONE] * 95 + [EIGHT] * 2 + [HALF] * 3, threshold=95.0)
    assert typical.shapes == (ONE,) and (EIGHT, 2) in typical.heavy
    cluster_nodes = nodes((16000, 1 << 20, 2, "T4"), (128000, 1 << 20, 8, "G3"))
    p = pod(cpu=12000, k=1, m=1000)
    alone = scores(Policy([(HomeHeadroomScore(typical, learn=False), 1.0)]), Cluster(cluster_nodes), p)
    heavy = scores(Policy([(HomeHeadroomScore(typical.with_heavy(), learn=False), 1.0)]), Cluster(cluster_nodes), p)
    assert alone[0] == alone[1]
    assert heavy[0] > heavy[1]
    term, _ = make_policy("guard", typical).plugins[1]  # guard's headroom term: these shapes, fixed
    assert isinstance(term, HomeHeadroomScore) and term.typical.shapes == typical.with_heavy().shapes
    assert not term.learn
