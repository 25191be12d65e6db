"""``carbon-defer`` beyond its prices (module docstring of :mod:`quasched.federation.carbon_defer`): node-level starts,
re-decisions at release and nested bookings. Run invariants: ``test_federation`` (every registered dispatcher)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import given, settings
from test_federation import small_scenarios

from quasched.federation.carbon_aware import CarbonAware, add_run
from quasched.federation.carbon_defer import CarbonDefer
from quasched.federation.dispatch import SLOT_S, Decision, View
from quasched.federation.engine import run_federation
from quasched.federation.forecast import HISTORY_H
from quasched.model import Cluster

H = 3600.0
JOB = 0
DEFERRED, INFLEXIBLE = 0, 1


def split_view(clean_w: float, dirty_w: float, latest: float, free_node: bool) -> View:
    """Cluster 0 (``clean_w`` g/kWh) of two 2-GPU nodes, one GPU taken on each unless ``free_node`` (then n1 is empty):
    2 GPUs free in sum, on one node only if ``free_node``; cluster 1 (``dirty_w``) of one empty 2-GPU node. Job 0:
    2 GPUs, 1 h, latest start ``latest``."""
    clean, dirty = Cluster(nodes(*[(64_000, 1 << 20, 2, "A100")] * 2)), Cluster(nodes((64_000, 1 << 20, 2, "A100")))
    for uid, node in [(10, 0), (11, 1)][:2 - free_node]:
        clean.place(pod(k=1, m=1000, uid=uid), node, (0,))
    intensity = np.array([[clean_w] * 4, [dirty_w] * 4])
    view = View(capacity=np.array([[4000.0, 2000.0], [128_000.0, 64_000.0]]), demand=np.array([[2000.0], [1000.0]]),
                duration=np.array([3600.0]), latest_start=np.array([latest]), kw=np.ones((1, 2)), intensity=intensity,
                history=np.repeat(intensity[:, :1], HISTORY_H, axis=1), placeable=np.ones((1, 2), dtype=bool))
    view.nodes, view.pod = [clean, dirty], {JOB: pod(k=2, m=1000, uid=JOB)}.__getitem__
    view.used[0] = [(2 - free_node) * 1000.0, 0.0]
    return view


def released(clean_w: float, dirty_w: float, latest: float, free_node: bool) -> tuple[CarbonDefer, tuple]:
    """Job 0 of :func:`split_view` was booked on cluster 0 at 0 and is released there at 0: the decision of
    :meth:`release`."""
    d = CarbonDefer(price=0, delay=0, perfect=True)
    d.reset(split_view(clean_w, dirty_w, latest, free_node))
    d.book(JOB, Decision(0, 0.0))
    return d, tuple(d.release(JOB, 0.0, 0))


@pytest.mark.parametrize("clean_w, dirty_w, latest, free_node, decision", [
    (100.0, 300.0, 2 * 3600.0, True, (0, 0.0)),  # a node holds it: released where it was booked
    (100.0, 300.0, 2 * 3600.0, False, (0, SLOT_S)),  # no node holds it: wait a slot for clean room, not the queue
    (300.0, 100.0, 2 * 3600.0, False, (1, 0.0)),  # ... or start now where a node holds it, if that is cheaper
    (100.0, 300.0, 0.0, False, (0, 0.0)),  # slack spent: released as before (it will queue)
])
def test_a_job_no_node_holds_is_decided_again_while_it_has_slack(clean_w, dirty_w, latest, free_node, decision):
    d, got = released(clean_w, dirty_w, latest, free_node)
    assert got == decision
    booked = d.ledger[0].sum(axis=1) * SLOT_S / 3600  # GPU milli-hours booked per cluster
    assert booked.tolist() == ([2000.0, 0.0] if decision[0] == 0 else [0.0, 2000.0])  # the stale booking left


def test_the_kept_fit_follows_placements_and_removals():
    """The fit per cluster and pod shape is kept between releases: after a 1-GPU pod takes a GPU of the free node no node
    holds the 2-GPU job (it is decided again: a slot later); after that pod leaves, one does (released where booked)."""
    d, got = released(100.0, 300.0, 2 * 3600.0, True)
    assert got == (0, 0.0)
    clean = d.view.nodes[0]
    clean.place(pod(k=1, m=1000, uid=12), 1, (0,))
    assert tuple(d.release(JOB, 0.0, 0)) == (0, SLOT_S)
    clean.remove(12)
    assert tuple(d.release(JOB, SLOT_S, 0)) == (0, SLOT_S)


def test_the_kept_demand_key_follows_the_pod_asked():
    """The node check keeps the last pod's demand key: a 2-GPU pod (no node of cluster 0 holds it), then a 1-GPU pod
    (each node does), then the 2-GPU pod again; each answer is the pod's own."""
    d, _ = released(100.0, 300.0, 2 * 3600.0, False)
    two, one = pod(k=2, m=1000, uid=20), pod(k=1, m=1000, uid=21)
    assert [d.holds(0, p) for p in (two, one, two, one)] == [False, True, False, True]


@pytest.mark.parametrize("rule, free_node, clean_w, decision", [
    (CarbonAware, False, 100.0, (0, 0.0)),  # aggregate check: 2 GPUs free in sum on the clean cluster; it queues
    (CarbonDefer, False, 100.0, (1, 0.0)),  # no node there holds it: now, on the dirty cluster's empty node
    (CarbonDefer, True, 100.0, (0, 0.0)),  # a clean node holds it: the clean cluster, as before
    (CarbonDefer, True, 500.0, (1, 0.0)),  # both hold it: the cheaper one (the other is 400 g/kWh)
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
    d = CarbonDefer(price=0, delay=0, perfect=True)
    d.reset(view)
    assert tuple(d.dispatch(JOB, 0.0)) == (0, 0.0)


def hourly(latest: float) -> tuple[CarbonDefer, list[float]]:
    """``carbon-defer`` on :func:`split_view` (no node of the clean cluster holds job 0, the dirty one's does),
    the job booked on the clean cluster at 0; the times at which it was decided again are recorded."""
    d = CarbonDefer(price=0, delay=0, perfect=True)
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


def two_clusters(dirty_w: float = 300.0, inflexible_h: float = 2.0) -> View:
    """A clean (100 g/kWh) and a dirty (``dirty_w``) cluster of one empty 2-GPU node each. Job 0: 2 GPUs for 1 h, latest
    start 3 h (flexible); job 1: 2 GPUs for ``inflexible_h``, latest start 0 (inflexible, arriving at 0)."""
    clusters = [Cluster(nodes((64_000, 1 << 20, 2, "A100"))) for _ in range(2)]
    intensity = np.array([[100.0] * 4, [dirty_w] * 4])
    view = View(capacity=np.array([[2000.0, 2000.0], [64_000.0, 64_000.0]]),
                demand=np.array([[2000.0, 2000.0], [1000.0, 1000.0]]), duration=np.array([H, inflexible_h * H]),
                latest_start=np.array([3 * H, 0.0]), kw=np.ones((2, 2)), intensity=intensity,
                history=np.repeat(intensity[:, :1], HISTORY_H, axis=1), placeable=np.ones((2, 2), dtype=bool))
    view.nodes, view.pod = clusters, {j: pod(k=2, m=1000, uid=j) for j in (DEFERRED, INFLEXIBLE)}.__getitem__
    return view


def booked_ahead(nested: bool = True) -> CarbonDefer:
    """``carbon-defer`` on :func:`two_clusters` with job 0 booked on the clean cluster from 1 h (deferred, not released);
    ``nested=False``: its inflexible jobs read the whole ledger (the rule without nested bookings)."""
    d = CarbonDefer(price=0, delay=0, perfect=True)
    d.reset(two_clusters())
    d.book(DEFERRED, Decision(0, H))
    if not nested:
        d.ledger_for = lambda job, now: d.ledger  # type: ignore[method-assign]
    return d


@pytest.mark.parametrize("nested, decision", [
    (False, (1, 0.0)),  # the clean cluster's ledger is full from 1 h: the dirty cluster, for 2 h
    (True, (0, 0.0)),  # the booking is not held: the clean cluster, now
])
def test_an_inflexible_job_may_take_room_a_deferred_job_only_booked(nested, decision):
    d = booked_ahead(nested)
    assert tuple(d.dispatch(INFLEXIBLE, 0.0)) == decision


def test_the_bumped_job_is_decided_again_at_its_release_and_held_once_released():
    d = booked_ahead()
    v = d.view
    d.dispatch(INFLEXIBLE, 0.0)
    assert tuple(d.release(INFLEXIBLE, 0.0, 0)) == (0, 0.0)  # released at once: its run is held
    v.nodes[0].place(v.pod(INFLEXIBLE), 0, (0, 1))
    v.used[:, 0] += v.demand[:, INFLEXIBLE]
    held = np.zeros_like(d.ledger)
    add_run(held, v, INFLEXIBLE, Decision(0, 0.0))
    assert np.array_equal(d.held, held)
    # at 1 h no clean node holds job 0: decided again (its booking leaves the ledger). Waiting for the clean node (free
    # at 2 h) is priced at >= 300 g/kWh (the room the next inflexible arrival, expected at last hour's rate, would be
    # displaced from, and its protection), no cheaper than the dirty cluster now: it starts there, and is held
    assert tuple(d.release(DEFERRED, H, 0)) == (1, H)
    add_run(held, v, DEFERRED, Decision(1, H))
    assert np.array_equal(d.held, held) and np.allclose(d.held, d.ledger)  # every job released


class Checked(CarbonDefer):
    """``carbon-defer`` checking after every arrival and release that the held ledger is the ledger less the bookings of
    the jobs not yet released (kept here, apart from the rule)."""

    def reset(self, view: View) -> None:
        super().reset(view)
        self.booked: dict[int, Decision] = {}

    def book(self, job: int, pick: Decision) -> Decision:
        self.booked[job] = pick
        return super().book(job, pick)

    def held_is_ledger_less_bookings(self) -> None:
        unreleased = np.zeros_like(self.ledger)
        for job, pick in self.booked.items():
            add_run(unreleased, self.view, job, pick)
        assert np.allclose(self.held, self.ledger - unreleased, atol=1e-6)

    def dispatch(self, job: int, now: float) -> Decision:
        pick = super().dispatch(job, now)
        self.held_is_ledger_less_bookings()
        return pick

    def release(self, job: int, now: float, cluster: int) -> Decision:
        pick = super().release(job, now, cluster)
        if pick.start <= now:
            del self.booked[job]
        self.held_is_ledger_less_bookings()
        return pick


@settings(max_examples=30, deadline=None)
@given(small_scenarios())
def test_the_held_ledger_is_the_ledger_less_unreleased_bookings_at_every_event(sc):
    d = Checked()
    run = run_federation(sc, d)
    assert np.all(np.isfinite(run.released)) and not d.booked  # every job released: the held ledger is the ledger


def test_a_bumped_job_waiting_within_the_hour_keeps_its_booking_unheld():
    """Job 1 runs 1.25 h here, the dirty cluster is 3000 g/kWh: at 1 h the bumped job 0 waits a slot for the clean node
    (decided again); at 1.25 h, still no node (job 1 has not left), within the same hour it only waits a slot more: the
    booking moves, unheld."""
    view = two_clusters(dirty_w=3000.0, inflexible_h=1.25)
    d = CarbonDefer(price=0, delay=0, perfect=True)
    d.reset(view)
    d.book(DEFERRED, Decision(0, H))
    d.dispatch(INFLEXIBLE, 0.0)
    d.release(INFLEXIBLE, 0.0, 0)
    view.nodes[0].place(view.pod(INFLEXIBLE), 0, (0, 1))
    view.used[:, 0] += view.demand[:, INFLEXIBLE]
    held = d.held.copy()
    assert tuple(d.release(DEFERRED, H, 0)) == (0, 1.25 * H)
    assert tuple(d.release(DEFERRED, 1.25 * H, 0)) == (0, 1.5 * H)
    booking = np.zeros_like(d.ledger)
    add_run(booking, view, DEFERRED, Decision(0, 1.5 * H))
    assert np.allclose(d.ledger - d.held, booking) and np.array_equal(d.held, held)  # booked from 1.5 h, unheld


def dirty_first(dirty_w: float = 400.0) -> View:
    """:func:`two_clusters` with the clusters swapped (dirty first, then the 100 g/kWh one), so that the cluster order
    cannot break a tie in the clean cluster's favour."""
    view = two_clusters(dirty_w=dirty_w)
    view.intensity, view.history = view.intensity[::-1].copy(), view.history[::-1].copy()
    view.__post_init__()
    return view


def test_a_job_filling_the_clean_cluster_is_priced_above_the_dirtiest():
    """Inflexible job 1 (2 GPUs) fills the clean 2-GPU cluster: u = 1. With I = (400, 100): mean 250, max 400,
    reference 250 + 0.5 × 150 = 325, clean gap 225, so the clean rate is 100 + 2 × 225 × 1 ** 8 = 550 > 400 and it
    sends the job to the dirty cluster (a cap at the dirtiest intensity was tried and not adopted)."""
    d = CarbonDefer(price=2, power=8, delay=0, perfect=True)
    d.reset(dirty_first())
    index = np.arange(8)  # the job's 2 h
    ledger = d.ledger[:, :, :8]
    assert np.allclose(d.rate(INFLEXIBLE, 0.0, index, ledger), [[400.0] * 8, [550.0] * 8])
    assert tuple(d.dispatch(INFLEXIBLE, 0.0)) == (0, 0.0)
