"""Home headroom: shapes weighted by 1 / (share of the GPUs that can hold them), hand-computed."""

from __future__ import annotations

import numpy as np
from builders import nodes, pod
from test_policy_headroom import scores

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import Policy
from quasched.policies.headroom import HeadroomScore
from quasched.policies.home_headroom import HomeHeadroomScore

#: 4 × (12 cores, 1 GPU), 1 × (120 cores, 8 GPUs): N = 5
MIX = TypicalPods(shapes=((12000, 1000, 1, ""), (120000, 1000, 8, "")), counts=(4, 1), freq=np.array([0.8, 0.2]))
#: a 96-core and a 128-core 8-GPU node: only the second holds the 120-core shape (c = 8/16)
TWO = nodes((96000, 1 << 20, 8, "G2"), (128000, 1 << 20, 8, "G3"))


def test_weights_divide_counts_by_the_gpu_share_of_their_homes():
    term = HomeHeadroomScore(MIX, learn=False)
    term.attach(Cluster(nodes((96000, 1 << 20, 8, "G2"), (128000, 1 << 20, 8, "G3"), (16000, 1 << 20, 2, "T4"))),
                NumpyStream(0))
    shapes = [(12000, 0, 1000, 1, ""), (120000, 0, 1000, 8, ""), (30000, 0, 1000, 2, ""), (2000, 0, 0, 0, "")]
    # GPUs 8 + 8 + 2 = 18: 12-core 1-GPU fits all (c = 1); 120-core only the 128-core node (c = 8/18);
    # 30-core 2-GPU the two big nodes (c = 16/18); CPU-only shapes keep their count
    assert term.weigh(shapes, [4, 1, 8, 5], 18) == ([4, round(18 / 8), round(8 * 18 / 16), 5], 18)


def test_a_shape_that_fits_everywhere_keeps_headroom_exactly():
    uniform = TypicalPods(shapes=((12000, 1000, 1, ""),), counts=(3,), freq=np.array([1.0]))
    p = pod(cpu=40000, k=1, m=1000)
    assert scores(Policy([(HomeHeadroomScore(uniform, learn=False), 1.0)]), Cluster(TWO), p) == \
        scores(Policy([(HeadroomScore(uniform, learn=False), 1.0)]), Cluster(TWO), p)


def test_the_only_home_of_a_large_shape_is_kept_for_it():
    # 40-core 1-GPU pod. 96-core node: 12-core copies min(8, 8) = 8 → min(7, 56/12) = 4, ΔH = −4·4·1000.
    # 128-core node: 8 → min(7, 88/12) = 7 (−4000) and its one 120-core copy is gone (−w·8000).
    # Headroom (w = 1): −16000 vs −12000 → the 128-core node; home weights (w = 1 / (8/16) = 2): −16000 vs −20000.
    p = pod(cpu=40000, k=1, m=1000)
    assert scores(Policy([(HeadroomScore(MIX, learn=False), 1.0)]), Cluster(TWO), p) == \
        [50 - 16000 / 5 / 160, 50 - 12000 / 5 / 160]
    assert scores(Policy([(HomeHeadroomScore(MIX, learn=False), 1.0)]), Cluster(TWO), p) == \
        [50 - 16000 / 5 / 160, 50 - 20000 / 5 / 160]
