"""Nested bookings (:mod:`quasched.federation.nested`): an inflexible job may take the room a deferred job has only
booked; the deferred job is decided again at its release. Run invariants: ``test_federation`` (every registered
dispatcher) and ``test_federation_planner`` (capacity)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from quasched.federation.carbon_aware import add_run
from quasched.federation.dispatch import Decision, View
from quasched.federation.engine import run_federation
from quasched.federation.forecast import HISTORY_H
from quasched.federation.held import HourlyRedecideHeld
from quasched.federation.nested import CappedNested, NestedBookings
from quasched.model import Cluster
from builders import nodes, pod
from test_federation import small_scenarios

H = 3600.0
DEFERRED, INFLEXIBLE = 0, 1


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


def booked_ahead(rule: type[HourlyRedecideHeld]) -> HourlyRedecideHeld:
    """``rule`` on :func:`two_clusters` with job 0 booked on the clean cluster from 1 h (deferred, not released)."""
    d = rule(price=0, delay=0, perfect=True)
    d.reset(two_clusters())
    d.book(DEFERRED, Decision(0, H))
    return d


@pytest.mark.parametrize("rule, decision", [
    (HourlyRedecideHeld, (1, 0.0)),  # the clean cluster's ledger is full from 1 h: the dirty cluster, for 2 h
    (NestedBookings, (0, 0.0)),  # the booking is not held: the clean cluster, now
])
def test_an_inflexible_job_may_take_room_a_deferred_job_only_booked(rule, decision):
    d = booked_ahead(rule)
    assert tuple(d.dispatch(INFLEXIBLE, 0.0)) == decision


def test_the_bumped_job_is_decided_again_at_its_release_and_held_once_released():
    d = booked_ahead(NestedBookings)
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


class Checked(NestedBookings):
    """``ours-nested`` checking after every arrival and release that the held ledger is the ledger less the bookings of
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
    d = NestedBookings(price=0, delay=0, perfect=True)
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


@pytest.mark.parametrize("rule, cluster", [(NestedBookings, 0), (CappedNested, 1)])
def test_a_job_filling_the_clean_cluster_is_priced_at_most_at_the_dirtiest(rule, cluster):
    """Inflexible job 1 (2 GPUs) fills the clean 2-GPU cluster: u = 1. With I = (400, 100): mean 250, max 400,
    reference 250 + 0.5 × 150 = 325, clean gap 225, so the rule's clean rate is 100 + 2 × 225 × 1 ** 8 = 550 > 400
    and it sends the job to the dirty cluster. Capped, the clean rate is 400 − 1e-9 × 300 < 400: the clean cluster
    (seed 121's case)."""
    d = rule(price=2, power=8, delay=0, perfect=True)
    d.reset(dirty_first())
    index = np.arange(8)  # the job's 2 h
    ledger = d.ledger[:, :, :8]
    assert np.allclose(NestedBookings.rate(d, INFLEXIBLE, 0.0, index, ledger), [[400.0] * 8, [550.0] * 8])
    assert tuple(d.dispatch(INFLEXIBLE, 0.0)) == (cluster, 0.0)
    if rule is CappedNested:
        capped = d.rate(INFLEXIBLE, 0.0, index, ledger)
        assert np.allclose(capped, [[400.0] * 8, [400.0 - 3e-7] * 8], rtol=0, atol=1e-10)


class CapChecked(CappedNested):
    """Asserts the cap on every rate it prices."""

    def rate(self, job, now, index, ledger):
        rate = super().rate(job, now, index, ledger)
        assert np.all(rate <= self.priced(now, index)[0].max(axis=0))
        return rate


@settings(max_examples=30, deadline=None)
@given(small_scenarios())
def test_the_capped_rate_never_exceeds_the_dirtiest_expected_intensity(sc):
    run = run_federation(sc, CapChecked())
    assert np.all(np.isfinite(run.released))
