"""Fragmentation measure: the hand-computed worked example of docs/simulator-spec.md and typical pods."""

from __future__ import annotations

import numpy as np
import pytest

from quasched.metrics.fragmentation import FragmentationModel, frag_amount
from quasched.metrics.typical import TypicalPods
from quasched.policies.fgd import sigmoid_score

TOY = TypicalPods(
    shapes=((4000, 500, 1, ""), (8000, 1000, 1, ""), (2000, 0, 0, "")),
    counts=(5, 3, 2),
    freq=np.array([0.5, 0.3, 0.2]),
)


def vec(model, cpu, gpu):
    return model.vectors(np.array([cpu]), np.array([gpu]), np.array([0]))[0]


def test_worked_example_node_vector():
    model = FragmentationModel(TOY, ("T4",))
    v = vec(model, 6000, [300, 1000])
    np.testing.assert_allclose(v, [0, 150, 500, 390, 260, 0, 0])
    assert frag_amount(v) == pytest.approx(800)


def test_worked_example_fgd_scores():
    model = FragmentationModel(TOY, ("T4",))
    before = frag_amount(vec(model, 6000, [300, 1000]))
    after_dev0 = frag_amount(vec(model, 4000, [100, 1000]))
    after_dev1 = frag_amount(vec(model, 4000, [300, 800]))
    np.testing.assert_allclose(vec(model, 4000, [300, 800]), [330, 150, 400, 0, 220, 0, 0])
    assert sigmoid_score(np.array([before - after_dev0, before - after_dev1])).tolist() == [54, 52]
    whole = frag_amount(vec(model, 3000, [300, 0]))
    assert sigmoid_score(np.array([before - whole])).tolist() == [62]


def test_no_access_counts_all_idle_as_fragment():
    typical = TypicalPods(((4000, 500, 1, "V100M32"),), (1,), np.array([1.0]))
    model = FragmentationModel(typical, ("T4",))
    np.testing.assert_allclose(vec(model, 6000, [300, 1000]), [0, 0, 0, 0, 0, 0, 1300])


def test_padding_devices_and_cpu_only_nodes_contribute_nothing():
    model = FragmentationModel(TOY, ("", "T4"))
    cpu_node = model.vectors(np.array([6000]), np.array([[0, 0]]), np.array([0]))[0]
    assert not cpu_node.any()


def test_typical_pods_of_default_trace(openb):
    typical = TypicalPods.from_workload(openb.pods("default"))
    assert len(typical.shapes) == 35
    assert typical.shapes[:3] == ((3152, 810, 1, ""), (11300, 1000, 1, ""), (11400, 1000, 1, ""))
    assert typical.freq[0] == pytest.approx(0.134818, abs=1e-6)
    assert sum(typical.counts) / 8152 == pytest.approx(0.9526, abs=1e-4)
