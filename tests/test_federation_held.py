"""Node-level starts (:mod:`quasched.federation.held`): a job starts now only where a node holds it. Run invariants:
``test_federation`` (every registered dispatcher)."""

from __future__ import annotations

import pytest

from quasched.federation.dispatch import SLOT_S, Decision
from quasched.federation.held import HourlyRedecideHeld, ProtectionHeld, RedecideHeld
from quasched.federation.protection import ProtectionPriced
from builders import pod

H = 3600.0
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


def hourly(latest: float) -> tuple[HourlyRedecideHeld, list[float]]:
    """``ours-redecide-hourly`` on :func:`split_view` (no node of the clean cluster holds job 0, the dirty one's does),
    the job booked on the clean cluster at 0; the times at which it was decided again are recorded."""
    d = HourlyRedecideHeld(price=0, delay=0, perfect=True)
    d.reset(split_view(100.0, 300.0, latest, False))
    d.book(JOB, Decision(0, 0.0))
    decided: list[float] = []
    options = d.options
    d.options = lambda job, now: decided.append(now) or options(job, now)  # type: ignore[method-assign]
    return d, decided


def test_a_waiting_job_is_decided_again_at_most_once_an_hour():
    d, decided = hourly(latest=2 * H)
    assert tuple(d.release(JOB, 0.0, 0)) == (0, SLOT_S)  # decided: wait a slot for the clean cluster
    assert tuple(d.release(JOB, SLOT_S, 0)) == (0, 2 * SLOT_S)  # same hour: waits a slot more, not decided
    assert tuple(d.release(JOB, 2 * SLOT_S, 0)) == (0, 3 * SLOT_S)
    assert decided == [0.0]
    assert d.ledger[0].sum(axis=1).tolist() == [2000.0 * H / SLOT_S, 0.0]  # one booking, moved with the job
    d.release(JOB, H, 0)  # the next hour: decided again
    assert decided == [0.0, H]


def test_its_last_release_before_the_latest_start_is_always_decided():
    d, decided = hourly(latest=SLOT_S + 60)
    d.release(JOB, 0.0, 0)
    assert tuple(d.release(JOB, SLOT_S, 0)) == (1, SLOT_S)  # no later slot on time: starts now where a node holds it
    assert decided == [0.0, SLOT_S]
