"""The federation front: jobs submitted to it go to member clusters in grid zones, where and when a dispatcher says.

The dispatchers are the simulation's (:mod:`quasched.federation.registry`, ``carbon-defer`` by default) and so are the
rules around them (:class:`~quasched.federation.loop.Dispatching`); only the clock (the front's, wall or virtual), the
jobs (those submitted) and the sites (members behind their API, :mod:`.site`) are live. The dispatchers' view starts at
the hour the front started (``t = 0``) and plans a year from it; the week before comes from each zone's signal, and
each hour's intensity × PUE is written once, at its first step, from the signal's reading then (the hours after it
hold the signal's forecast, which only ``perfect=true`` reads). One loop thread decides; the API only hands it jobs.

A job's dispatch is in the store (``dispatches``): its member and release time and why, its id on the member once sent
(with the client token ``<front>-<job id>``, so a repeat after a crash makes no second job), its energy and carbon once
it ended: the modelled dynamic IT energy of its run on that member (:func:`~quasched.federation.scenario.dynamic_kw`)
× the hours' intensity × PUE. Its state is the member's, read back every :data:`READ_S`.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from quasched.federation.dispatch import Dispatcher, View
from quasched.federation.forecast import HISTORY_H
from quasched.federation.loop import Dispatching
from quasched.federation.registry import make_dispatcher
from quasched.federation.scenario import dynamic_kw
from quasched.front.members import Member, MemberError
from quasched.front.site import RemoteSite, node_spec
from quasched.front.store import Dispatch, FrontStore
from quasched.metrics.typical import TypicalWindow
from quasched.model.cluster import Cluster
from quasched.model.fit import Demand, fit_matrix
from quasched.model.workload import Pod
from quasched.service.domain import Event, Job, JobSpec, JobState, PendingReason, Reason
from quasched.service.loop.state import job_pod, utc
from quasched.service.runtime.schemas import gpus_of
from quasched.service.store.leadership import Holder, identity
from quasched.signals.base import HOUR_S, Reading, Signal, SignalError

log = logging.getLogger("quasched.front")

#: hours the dispatchers plan from the front's start
HORIZON_H = 366 * 24
#: hours of a zone's signal read at each hour (now and its forecast; past them its last value continues)
FORECAST_H = 72
#: members' nodes and the jobs sent to them are read this often, s
READ_S = 5.0
#: a member's jobs read per round, at most (the rest at the next)
READS_PER_ROUND = 200
ENDED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class Standby(RuntimeError):
    """This front stands by: ``leader`` decides."""

    def __init__(self, leader: Holder) -> None:
        super().__init__(f"this front stands by; the leader is {leader.describe()}")
        self.leader = leader


class Sending(RuntimeError):
    """A job's sending to its member is not known to have arrived yet."""


@dataclass(frozen=True)
class Zone:
    """A member's grid zone: its signal and the member's PUE."""

    signal: Signal
    pue: float


class Front:
    """The front of the module docstring: :meth:`submit` from any thread, :meth:`step` (or :meth:`start`'s thread)
    decides, sends and reads back."""

    def __init__(self, store: FrontStore, members: Sequence[Member], zones: Sequence[Zone], dispatcher: str,
                 policy: str = "fgd", name: str = "front", clock: Callable[[], float] = time.time,
                 read_s: float = READ_S) -> None:
        self.store, self.members, self.zones, self.name, self.clock = store, list(members), list(zones), name, clock
        self.read_s = read_s
        self.lock = threading.RLock()
        nodes = []
        for member in self.members:
            try:
                nodes.append(member.nodes())
            except MemberError as err:
                raise ValueError(f"{err}: the front reads every member's nodes when it starts") from None
        self.typical = TypicalWindow()  # the mirrors' policies learn typical pods from the arrivals, as serve's
        self.sites = [RemoteSite(m, n, policy, i, self.typical, self._sender(i)) for i, (m, n) in enumerate(zip(self.members, nodes))]
        self.specs = [node_spec(n, m.name) for m, n in zip(self.members, nodes)]
        self.empty = [Cluster(s) for s in self.specs]
        self.spec = dispatcher
        self.warnings: dict[str, str] = {}  # zone -> what is wrong with its signal
        self.new_admin_token: str | None = None  # created at the first start (the API says it once)
        self.redo = False  # set by a send the member refused, read by the release that made it
        self.leading = False  # whether this front holds the store's lease and decides (else a standby)
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._rebuild()

    # ------------------------------------------------------------ leading
    def _rebuild(self, resume: bool = False) -> None:
        """(Under the lock.) A fresh plan from the current hour: the view, the dispatcher, the mirrors' assumptions;
        ``resume``: then the unfinished jobs from the store (:meth:`_resume`)."""
        self.epoch = float(int(self.clock() // HOUR_S) * HOUR_S)
        self.dispatcher: Dispatcher = make_dispatcher(self.spec)
        self.observed = -1  # the last hour written
        self.view = self._view()
        self.rules = Dispatching(self.dispatcher, self.view, self.sites, 0, lambda job, t: None)
        self.jobs: list[Job] = []  # by view index
        self.dispatch_of: list[Dispatch] = []
        self.index: dict[int, int] = {}  # front job id -> view index
        self.inbox: list[int] = []  # view indexes arrived, not decided
        self.releases: list[tuple[float, int]] = []
        self.resend: set[int] = set()  # view indexes whose sending may have reached their member (:meth:`_send`)
        self.next_read = 0.0
        for site in self.sites:
            site.reset()
        if resume:
            self._resume()

    def lead(self) -> None:
        """Take the store's lease at once (a sole front; raises if another holds it) and lead."""
        epoch = self.store.acquire_lease(identity(), "", None)
        if epoch is None:
            raise ValueError(f"the front's store is led by {self.store.leader().describe()}")
        self.take_over(epoch)

    def take_over(self, epoch: int) -> None:
        """This front won the lease at ``epoch``: rebuild from the store and decide (the elector's candidate)."""
        with self.lock:
            self._rebuild(resume=True)
            self.leading = True
        log.warning("quasched front: leading (epoch %d): %d unfinished jobs from the store", epoch, len(self.jobs))

    def step_down(self, reason: str) -> None:
        if self.leading:
            self.leading = False
            log.warning("quasched front: stepped down to standby: %s", reason)

    def settle(self) -> None:
        """Nothing to stop beyond deciding (the loop thread skips its rounds while standing by)."""

    # ------------------------------------------------------------ the view
    def _view(self) -> View:
        clusters = len(self.members)
        capacity = np.array([[s.num_gpus.sum() * 1000 for s in self.specs], [s.cpu_milli.sum() for s in self.specs]],
                            dtype=float)
        weeks = [self._intensity(c, lambda s: s.history(self.epoch, HISTORY_H), HISTORY_H) for c in range(clusters)]
        missing = [self.zones[c].signal.zone for c, week in enumerate(weeks) if week is None]
        if missing:
            raise ValueError(f"zone {missing[0]}: no intensity for the week before the start "
                             f"({self.warnings[missing[0]]}); the dispatchers' forecasts start from it")
        history = np.vstack(weeks)  # type: ignore[arg-type]
        view = View(capacity, np.zeros((2, 0)), np.zeros(0), np.zeros(0), np.zeros((0, clusters)),
                    np.zeros((clusters, HORIZON_H)), history, np.zeros((0, clusters), dtype=bool))
        view.nodes, view.pod = [s.cluster for s in self.sites], self._pod
        self.dispatcher.reset(view)
        return view

    def _intensity(self, cluster: int, read: Callable[[Signal], Reading], hours: int) -> np.ndarray | None:
        """``hours`` values × PUE of ``cluster``'s zone from ``read(signal)`` (past its end, its last value); None,
        warned about, if the signal has nothing to give."""
        zone = self.zones[cluster]
        try:
            reading = read(zone.signal)
        except SignalError as err:
            self._warn(zone.signal.zone, str(err))
            return None
        self._warn(zone.signal.zone, reading.warning if reading.stale else None)
        values = np.asarray(reading.g_per_kwh, dtype=float)
        return zone.pue * values[np.minimum(np.arange(hours), len(values) - 1)]

    def _warn(self, zone: str, warning: str | None) -> None:
        if warning and self.warnings.get(zone) != warning:
            log.warning("quasched front: zone %s: %s", zone, warning)
        if warning:
            self.warnings[zone] = warning
        else:
            self.warnings.pop(zone, None)

    def observe(self, now: float) -> None:
        """Write the hours up to ``now``'s: each from its zone's reading at its first step (module docstring)."""
        hour = min(int((now - self.epoch) // HOUR_S), HORIZON_H - 1)
        if hour <= self.observed:
            return
        for c in range(len(self.members)):
            ahead = self._intensity(c, lambda s: s.hourly(now, FORECAST_H), FORECAST_H)
            if ahead is not None:  # else the last reading's forecast stays, as the warning says
                self.view.intensity[c, hour:] = ahead[np.minimum(np.arange(HORIZON_H - hour), FORECAST_H - 1)]
        self.observed = hour

    def _pod(self, index: int) -> Pod:
        return mirror_pod(self.jobs[index].spec, index)

    # ------------------------------------------------------------ jobs
    def submit(self, spec: JobSpec, deadline: float, run_s: float, now: float | None = None) -> tuple[Job, Dispatch]:
        """Store a new job (or the first of its ``client_token``) and hand it to the loop; returns it and its
        dispatch."""
        now = self.clock() if now is None else now
        if not self.leading:
            raise Standby(self.store.leader())
        job = self.store.insert_job(spec, 0, now)
        dispatch = Dispatch(job.id, deadline, run_s)
        self.store.add_dispatch(dispatch)
        with self.lock:
            if job.id not in self.index:
                self._add(job, self.store.dispatches([job.id])[job.id], arrived=True)
            index = self.index[job.id]
            self._wake.set()
            return self.jobs[index], self.dispatch_of[index]

    def _add(self, job: Job, dispatch: Dispatch, arrived: bool) -> int:
        """(Under the lock.) ``job`` into the view's arrays; ``arrived``: the loop decides it at its next step."""
        v, index = self.view, len(self.jobs)
        self.jobs.append(job)
        self.dispatch_of.append(dispatch)
        self.index[job.id] = index
        pod = mirror_pod(job.spec, index)
        self.typical.observe(pod)
        v.demand = np.hstack([v.demand, [[pod.gpu_request * job.spec.pods], [pod.cpu_milli * job.spec.pods]]])
        v.duration = np.append(v.duration, dispatch.run_s)
        v.latest_start = np.append(v.latest_start, dispatch.deadline - dispatch.run_s - self.epoch)
        kw = dynamic_kw(np.array([pod.gpu_request]), np.array([pod.cpu_milli]), self.specs)[0] * job.spec.pods
        v.kw = np.vstack([v.kw, kw])
        v.placeable = np.vstack([v.placeable, self._placeable(pod)])
        self.rules.grow(len(self.jobs))
        if arrived:
            self.inbox.append(index)
        return index

    def _placeable(self, pod: Pod) -> np.ndarray:
        """Per member: up, and some node of it could hold ``pod`` when empty."""
        demand = Demand.of([pod])
        return np.array([site.up and bool(np.asarray(fit_matrix(empty, demand)).any())
                         for site, empty in zip(self.sites, self.empty)])

    def _resume(self) -> None:
        """Rebuild from the store: unfinished jobs never sent are decided again now; those sent are read back."""
        unfinished = [j for j in self.store.load()[2]]
        dispatches = self.store.dispatches([j.id for j in unfinished])
        names = {m.name: c for c, m in enumerate(self.members)}
        now = self.clock()
        with self.lock:
            for job in sorted(unfinished, key=lambda j: j.id):
                dispatch = dispatches.get(job.id)
                if dispatch is None:
                    continue
                sent = dispatch.sent_at is not None and dispatch.member in names
                index = self._add(job, dispatch, arrived=not sent)
                if sent:
                    c = self.rules.cluster[index] = names[dispatch.member]
                    self.rules.released[index] = now - self.epoch
                    if dispatch.remote is not None:
                        self.rules.start(index, now - self.epoch)  # read back at the first round
                    else:  # the last leader may have sent it: sent again, to the same member
                        self.view.enqueue(c, index)
                        self.resend.add(index)

    # ------------------------------------------------------------ the loop
    def step(self, now: float | None = None) -> None:
        """One round, in the replay's order at one time: read the members back (departures), release what is due,
        then decide the arrivals."""
        now = self.clock() if now is None else now
        if not self.leading:
            return
        fetched = self._fetch() if now >= self.next_read else None
        with self.lock:
            if not self.leading:
                return
            self.observe(now)
            t = now - self.epoch
            if fetched is not None:
                self._read(fetched, now)
                self.next_read = now + self.read_s
                self._send_again()
            self._release_due(t)
            for index in self.inbox:  # in order, each released before the next arrives if it starts now
                self._arrive(index, t)
                self._release_due(t)
            self.inbox.clear()

    def _release_due(self, t: float) -> None:
        while self.releases and self.releases[0][0] <= t:
            _, index = heapq.heappop(self.releases)
            self._release(index, t)

    def _arrive(self, index: int, t: float) -> None:
        dispatch = self.dispatch_of[index]
        if not dispatch.baseline_member:
            dispatch.baseline_member = self.members[int(np.argmin(self.view.load_after(index)))].name
        at = self.rules.arrive(index, t)
        c = int(self.rules.cluster[index])
        dispatch.member, dispatch.release_at = self.members[c].name, self.epoch + at
        dispatch.why = self._why(c, t, at)
        job = self.jobs[index]
        job.reason = PendingReason(Reason.DISPATCHED, dispatch.why, {"member": dispatch.member,
                                                                   "release_at": dispatch.release_at})
        self.store.save_dispatch(dispatch, (job,), (Event(self.epoch + t, "dispatched", job.id, dispatch.member,
                                                          {"release_at": dispatch.release_at, "why": dispatch.why}),))
        heapq.heappush(self.releases, (at, index))

    def _why(self, cluster: int, t: float, at: float) -> str:
        """Where and when, in words: deferred until X because Y g/kWh (expected then) against Z now."""
        zone = self.zones[cluster].signal.zone
        hour = int(t // HOUR_S)
        expected = getattr(self.dispatcher, "expected", None)
        def rate(h: int) -> float:
            if expected is not None:
                return float(expected(t, np.array([h]))[cluster, 0])
            return float(self.view.intensity[cluster, min(h, HORIZON_H - 1)])
        now_g = rate(hour)
        if at <= t:
            return f"to {self.members[cluster].name} ({zone}) now: {now_g:.0f} g/kWh x PUE"
        return (f"deferred until {utc(self.epoch + at)} on {self.members[cluster].name} ({zone}): "
                f"{rate(int(at // HOUR_S)):.0f} g/kWh x PUE expected then, {now_g:.0f} now")

    def _release(self, index: int, t: float) -> None:
        self.redo = False
        again = self.rules.release(index, t)
        if again is not None:
            heapq.heappush(self.releases, (again, index))
            return
        if self.redo:  # the member refused it: it is decided again, without that member
            c = int(self.rules.cluster[index])
            if self.view.queued[c] and np.isnan(self.rules.placed[index]):
                self.view.dequeue(c, index)
            self.view.placeable[index] = self._placeable(self._pod(index))
            if self.view.placeable[index].any():
                self._arrive(index, t)

    def _sender(self, cluster: int) -> Callable[[int], str | None]:
        return lambda index: self._send(cluster, index)

    def _send(self, cluster: int, index: int) -> str | None:
        """(Under the lock, from the rules.) Submit job ``index`` to member ``cluster``; the state the member gave it,
        or None (and the member marked down) if it did not answer.

        The intent (member, ``sent_at``) is stored first: a front that dies after the member took the job leaves it,
        and whoever leads next sends it again to that member under the same client token, which returns the first
        job. A call that may have reached the member (a timeout, a 5xx, a bad answer) keeps the intent: the job waits
        there and is sent again each round until the member answers; only a call that surely did not (refused
        connection, refused request) lets the job be decided again elsewhere (:attr:`redo`)."""
        job, dispatch, site = self.jobs[index], self.dispatch_of[index], self.sites[cluster]
        dispatch.member, dispatch.sent_at = site.member.name, self.clock()
        self.store.save_dispatch(dispatch)  # fenced: a leader that lost the lease sends nothing
        try:
            answer = site.member.submit(job_body(job.spec, f"{self.name}-{job.id}"))
            remote, state = str(answer["id"]), str(answer["state"])
        except (MemberError, KeyError, TypeError, ValueError) as err:
            error = err if isinstance(err, MemberError) else MemberError(
                f"member {site.member.name}: submit: bad answer ({err})")
            self._down(cluster, error)
            if error.delivered:
                self.resend.add(index)
            else:
                dispatch.sent_at = None
                self.store.save_dispatch(dispatch)
                self.redo = True
            return None
        self.resend.discard(index)
        dispatch.remote = remote
        job.reason = PendingReason(Reason.DISPATCHED, f"sent to {site.member.name} as job {remote}",
                                   {"member": site.member.name, "remote": remote})
        self.store.save_dispatch(dispatch, (job,), (Event(dispatch.sent_at, "sent", job.id, site.member.name,
                                                          {"remote": remote}),))
        return state

    def _send_again(self) -> None:
        """(Under the lock.) The jobs whose sending may have reached their member, sent again (same client token)."""
        for index in sorted(self.resend):
            c = int(self.rules.cluster[index])
            if self.sites[c].up:
                self._send(c, index)

    def _down(self, cluster: int, error: MemberError) -> None:
        site = self.sites[cluster]
        if site.up:
            log.warning("quasched front: %s: no new jobs go there", error)
            self.store.save((), (Event(self.clock(), "member-down", None, site.member.name, {"error": str(error)}),))
        site.down(error, self.clock())
        self.view.placeable[:, cluster] &= ~np.isnan(self.rules.released)  # only what it holds already

    def _fetch(self) -> list[tuple[list[dict[str, Any]] | MemberError, dict[str, dict[str, Any]]]]:
        """(Outside the lock: submissions go on meanwhile.) Each member's nodes and the state of the jobs sent to it
        (at most :data:`READS_PER_ROUND`), or the error that stopped the reading."""
        with self.lock:
            sent = [[d.remote for i, d in enumerate(self.dispatch_of) if d.remote is not None
                     and d.member == site.member.name and self.jobs[i].state not in ENDED][:READS_PER_ROUND]
                    for site in self.sites]
        out: list[tuple[list[dict[str, Any]] | MemberError, dict[str, dict[str, Any]]]] = []
        for site, refs in zip(self.sites, sent):
            answers: dict[str, dict[str, Any]] = {}
            try:
                for ref in refs:  # the jobs first: one ended between the two reads is then not in use on a node
                    answers[ref] = site.member.job(ref)
                out.append((site.member.nodes(), answers))
            except MemberError as err:
                out.append((err, answers))
        return out

    def _read(self, fetched: list[tuple[list[dict[str, Any]] | MemberError, dict[str, dict[str, Any]]]],
              now: float) -> None:
        """(Under the lock.) Take what :meth:`_fetch` read: the jobs' states, each member's mirror and health."""
        for c, (site, (nodes, answers)) in enumerate(zip(self.sites, fetched)):
            remote = {d.remote: i for i, d in enumerate(self.dispatch_of)
                      if d.remote is not None and d.member == site.member.name and self.jobs[i].state not in ENDED}
            for ref, answer in answers.items():
                if ref in remote:
                    self._mirror(remote[ref], answer, now)
            if isinstance(nodes, MemberError):
                self._down(c, nodes)
                continue
            if not site.up:
                log.warning("quasched front: member %s is back", site.member.name)
                self.store.save((), (Event(now, "member-up", None, site.member.name, {}),))
                site.up, site.down_since = True, None
                self.view.placeable[np.isnan(self.rules.released), c] = [
                    bool(np.asarray(fit_matrix(self.empty[c], Demand.of([self._pod(int(i))]))).any())
                    for i in np.flatnonzero(np.isnan(self.rules.released))]
            on_nodes = {str(j) for n in nodes for j in n.get("jobs", [])}
            site.read(nodes, {remote[r] for r in on_nodes if r in remote})
            self.view.used[:, c] = site.used  # what the member reads in use, with what is assumed on it

    def _mirror(self, index: int, answer: dict[str, Any], now: float) -> None:
        """Take the member's state of job ``index``: started, ended (billed), still waiting."""
        job, dispatch = self.jobs[index], self.dispatch_of[index]
        try:
            state = JobState(answer["state"])
        except (KeyError, ValueError):
            return
        t = now - self.epoch
        c = int(self.rules.cluster[index])
        started = answer.get("started_at")
        if state == JobState.PENDING and not np.isnan(self.rules.placed[index]) and job.state == JobState.PENDING:
            # the mirror said it starts now, the member queued it: it waits there
            self.rules.placed[index] = np.nan
            self.view.used[:, c] -= self.view.demand[:, index]
            self.view.enqueue(c, index)
        if state in (JobState.RUNNING, *ENDED) and started is not None and job.started_at is None:
            if np.isnan(self.rules.placed[index]):
                self.rules.dequeue(index, float(started) - self.epoch)
            job.started_at = float(started)
        if state == job.state:
            return
        job.state = state
        job.reason = None if state != JobState.PENDING else job.reason
        events = [Event(now, state.value, job.id, dispatch.member, {"remote": dispatch.remote})]
        if state in ENDED:
            job.finished_at = float(answer.get("finished_at") or now)
            job.exit_code = answer.get("exit") if isinstance(answer.get("exit"), int) else job.exit_code
            if job.started_at is not None:
                self._bill(index, job.started_at, job.finished_at)
            if not np.isnan(self.rules.placed[index]):
                self.rules.depart(index)
            self.sites[c].forget(index)
        self.store.save_dispatch(dispatch, (job,), tuple(events))

    def _bill(self, index: int, start: float, end: float) -> None:
        """Energy and carbon of job ``index``'s run from ``start`` to ``end`` (epoch s) on its member, and of the same
        run at once on its baseline member."""
        dispatch, c = self.dispatch_of[index], int(self.rules.cluster[index])
        dispatch.kwh = float(self.view.kw[index, c]) * (end - start) / HOUR_S
        dispatch.kg = self._kg(index, c, start, end)
        baseline = [m.name for m in self.members].index(dispatch.baseline_member) if dispatch.baseline_member else c
        submitted = self.jobs[index].submitted_at
        dispatch.baseline_kg = self._kg(index, baseline, submitted, submitted + end - start)

    def _kg(self, index: int, cluster: int, start: float, end: float) -> float:
        """kg CO2e of job ``index`` running on ``cluster`` from ``start`` to ``end`` (epoch s): its dynamic kW × the
        written hours' intensity × PUE."""
        first, last = int((start - self.epoch) // HOUR_S), int(np.ceil((end - self.epoch) / HOUR_S))
        hours = np.arange(max(first, 0), max(last, first + 1))
        lo = np.maximum(self.epoch + hours * HOUR_S, start)
        hi = np.minimum(self.epoch + (hours + 1) * HOUR_S, end)
        overlap_h = np.clip(hi - lo, 0, None) / HOUR_S
        rate = self.view.intensity[cluster, np.minimum(hours, HORIZON_H - 1)]
        return float(self.view.kw[index, cluster]) * float(overlap_h @ rate) / 1000.0

    def unreachable(self, member: str) -> str:
        """Why the jobs of ``member`` show their last known state ("" while it answers): the policy for a member
        that stays away is to report its jobs, not to send them elsewhere (they may still run there)."""
        site = next((s for s in self.sites if s.member.name == member), None)
        if site is None or site.up or site.down_since is None:
            return ""
        return f"member {member} has not answered since {utc(site.down_since)} ({site.error}): its last known state"

    def cancel(self, job_id: int) -> Job:
        """Cancel a job: withdrawn if not sent yet, else cancelled on its member; :class:`MemberError` if its member
        cannot be reached, :class:`Sending` while its sending is not known to have reached it (try again)."""
        if not self.leading:
            raise Standby(self.store.leader())
        with self.lock:
            index = self.index[job_id]
            job, dispatch = self.jobs[index], self.dispatch_of[index]
            if job.state in ENDED:
                return job
            if dispatch.sent_at is not None and dispatch.remote is None:
                raise Sending(f"job {job_id} is being sent to {dispatch.member}: try again once it is there")
            if dispatch.remote is None:
                job.state, job.finished_at = JobState.CANCELLED, self.clock()
                self.releases = [(t, i) for t, i in self.releases if i != index]
                heapq.heapify(self.releases)
                self.store.save_dispatch(dispatch, (job,), (Event(job.finished_at, "cancelled", job.id, "", {}),))
                return job
            site = next(s for s in self.sites if s.member.name == dispatch.member)
            self._mirror(index, site.member.cancel(dispatch.remote), self.clock())
            return job

    # ------------------------------------------------------------ thread
    def start(self, tick_s: float = 1.0) -> None:
        """Run rounds in a thread: every ``tick_s``, and at once when a job is submitted."""
        def run() -> None:
            while not self._stop.is_set():
                self._wake.wait(tick_s)
                self._wake.clear()
                try:
                    self.step()
                except Exception:  # one bad round must not end the front: said, and tried again
                    log.exception("quasched front: a round failed")
        self._thread = threading.Thread(target=run, name="quasched-front", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for member in self.members:
            member.close()


def mirror_pod(spec: JobSpec, uid: int) -> Pod:
    """A job's pod as the front's view and mirrors place it: a command does not pin it to a node (``job_pod`` binds a
    command to the local node of the process running it; where a member runs it is the member's: a serve member on
    its own node, a Kubernetes member in its pod)."""
    return job_pod(replace(spec, command=()), uid=uid)


def job_body(spec: JobSpec, client_token: str) -> dict[str, Any]:
    """The member API's job fields of ``spec`` (``POST /jobs``), with ``client_token``."""
    gpus = gpus_of(spec.num_gpu, spec.gpu_milli)
    body: dict[str, Any] = {"name": spec.name, "team": spec.team, "user": spec.user, "app": spec.app,
                            "cpu": spec.cpu_milli / 1000, "memory": spec.memory_mib, "gpus": gpus,
                            "gpu_model": spec.gpu_model, "pods": spec.pods, "priority_class": spec.priority_class,
                            "client_token": client_token}
    if spec.duration_s is not None:
        body["duration"] = spec.duration_s
    if spec.command:
        body["command"], body["env"], body["workdir"] = list(spec.command), dict(spec.env), spec.workdir
    if spec.time_limit_s is not None:
        body["time_limit"] = spec.time_limit_s
    return body

