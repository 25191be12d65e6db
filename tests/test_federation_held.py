"""Node-level starts (:mod:`quasched.federation.held`): a job starts now only where a node holds it. Run invariants:
``test_federation`` (every registered dispatcher)."""

from __future__ import annotations

import pytest

from quasched.federation.held import ProtectionHeld, RedecideHeld
from quasched.federation.protection import ProtectionPriced
from builders import pod
from test_federation_redecide import JOB, split_view


@pytest.mark.parametrize("rule, free_node, clean_w, decision", [
    (ProtectionPriced, False, 100.0, (0, 0.0)),  # aggregate check: 2 GPUs free in sum on the clean cluster; it queues
    (ProtectionHeld, False, 100.0, (1, 0.0)),  # no node there holds it: now, on the dirty cluster's empty node
    (RedecideHeld, False, 100.0, (1, 0.0)),
    (ProtectionHeld, True, 100.0, (0, 0.0)),  # a clean node holds it: the clean cluster, as before
    (ProtectionHeld, True, 500.0, (1, 0.0)),  # both hold it: the cheaper one (the other is 400 g/kWh)
])
def test_an_inflexible_job_starts_where_a_node_holds_it(rule, free_node, clean_w, decision):
    """Job 0 (2 GPUs, inflexible: latest start = its arrival 0) of :func:`split_view`, clean cluster ``clean_w``
    g/kWh, the other 400."""
    d = rule(price=0, delay=0, perfect=True)
    d.reset(split_view(clean_w, 400.0, 0.0, free_node))
    assert tuple(d.dispatch(JOB, 0.0)) == decision


def test_with_no_node_anywhere_it_queues_on_the_least_loaded_cluster():
    """No node holds it anywhere (the dirty cluster's node runs a 1-GPU job too): the fallback queues it on the least
    loaded after it, the clean one (2 + 2 of 4 GPUs: 1.0, against 1 + 2 of 2: 1.5), although it is not cheaper."""
    view = split_view(500.0, 400.0, 0.0, False)
    view.nodes[1].place(pod(k=1, m=1000, uid=12), 0, (0,))
    view.used[0] = [2000.0, 1000.0]
    d = ProtectionHeld(price=0, delay=0, perfect=True)
    d.reset(view)
    assert tuple(d.dispatch(JOB, 0.0)) == (0, 0.0)
