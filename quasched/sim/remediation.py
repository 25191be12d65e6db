"""Device events of a replay with GPU failures, and the scheduler's remediation: a failure kills
the pods on its device (they re-arrive with the work up to their last checkpoint); an error or
warning may drain (cordon) its node — after enough recent errors or while the node is probably
flaky, lifted while the longest wait exceeds its priced wait — and migrate the pods on the erring
device or node, at once or, when a rule says it pays, at the pod's next periodic checkpoint. The
rules themselves (failure process, ledger, when a move pays) are in :mod:`.failures`."""

from __future__ import annotations

import numpy as np

from quasched.metrics.power import SECONDS_PER_HOUR
from quasched.sim.failures import Move, plan_migration
from quasched.sim.records import DOWN, KILL, MIGRATE, START, UP
from quasched.sim.replay_result import PENDING, QUEUED, RUNNING
from quasched.sim.replay_steps import ReplaySteps


class FailureSteps(ReplaySteps):
    """Device events, drains and migrations of one replay (one instance per run)."""

    def device_event(self, failures: bool) -> None:
        """The next device event: a failure kills its pods, a failure or warning may drain its node and
        migrate pods (all re-arrive at once); a device or a drained node back lets the queue retry."""
        assert self.faults is not None and self.ledger is not None and self.config.failures is not None
        event = self.faults.pop(failures)
        if event is None:
            return
        t, node, device, kind = event
        if kind == "move":
            self.deferred_move(t, node, device)
            return
        if kind == "check":
            self.lift_check(t, node)
            return
        if kind == "uncordon":
            if t < self.cordon_until[node]:
                return  # a later hold extended the drain
            self.cluster.uncordon(node)
        elif kind == "back":
            self.cluster.set_device_health(node, device, True)
            self.record(t, UP, -1, node)
        if kind in ("uncordon", "back"):
            if len(self.queue):
                self.retry(t)
            return
        self.cluster.errors.record(t, node, device)
        hit = self.running_on(node, device) if kind == "fail" else []
        if kind == "fail":
            self.cluster.set_device_health(node, device, False)
            for uid in hit:
                self.stop(uid)
                self.ledger.kill(uid, t, node)
            self.record(t, DOWN, -1, node)
            for uid in hit:
                self.record(t, KILL, uid, node)
        fc = self.config.failures
        evict = self.drain(t, node) and fc.evict
        scope = "node" if evict else fc.migrate
        moved = [] if scope == "off" else self.running_on(node, device if scope == "device" else None)
        if kind == "warn" and not evict and fc.migrate_rule != "always":  # only migrate="device" moves on a rule
            moved = [uid for uid in moved if self.plan_move(t, node, uid) == "now"]
        self.migrate(t, node, moved, fc.checkpoint_cost_min * 60)
        for uid in hit + moved:
            self.arrive(t, uid, START)
        if (hit or moved) and len(self.queue):
            self.retry(t)

    def plan_move(self, t: float, node: int, uid: int) -> Move:
        """Whether the warned pod ``uid`` stays, moves now or at its next checkpoint (deferred here)."""
        fc, ledger, faults = self.config.failures, self.ledger, self.faults
        assert fc is not None and ledger is not None and faults is not None
        if self.deferred.get(uid, (np.nan,))[0] == self.due[uid]:
            return "stay"  # already moving at its next checkpoint
        done, left, to_next, since = ledger.position(uid, t)
        remaining = done if fc.migrate_rule == "pays_lindy" else left
        move = plan_migration(fc, remaining if np.isfinite(remaining) else np.inf, to_next, since)
        if move == "checkpoint":
            self.deferred[uid] = (self.due[uid], t + to_next)
            faults.defer(uid, node, t + to_next)
        return move

    def deferred_move(self, t: float, node: int, uid: int) -> None:
        """A deferred migration at the pod's periodic checkpoint: nothing to write, unless the run it was planned
        for has ended (killed, finished)."""
        if self.status[uid] == RUNNING and self.deferred.get(uid) == (self.due[uid], t):
            del self.deferred[uid]
            self.migrate(t, node, [uid], 0.0)
            self.arrive(t, uid, START)
            if len(self.queue):
                self.retry(t)

    def migrate(self, t: float, node: int, uids: list[int], cost_s: float) -> None:
        """Checkpoint ``uids`` (``cost_s`` each on its GPUs) and take them off ``node``; they re-arrive after."""
        assert self.ledger is not None
        for uid in uids:
            devices = self.outcome.devices[uid]
            self.stop(uid)
            self.ledger.migrate(uid, t, cost_s, node, devices)
            self.record(t, MIGRATE, uid, node)

    def running_on(self, node: int, device: int | None) -> list[int]:
        """Pods running on ``node`` (on its GPU ``device`` unless None), in row order."""
        on_node = np.flatnonzero((self.outcome.node == node) & (self.status == RUNNING)).tolist()
        return on_node if device is None else [uid for uid in on_node if device in self.outcome.devices[uid]]

    def stop(self, uid: int) -> None:
        """Take a running pod off its node before it re-arrives (killed or migrated)."""
        self.cluster.remove(uid)
        self.due[uid] = np.nan
        self.status[uid] = PENDING

    def drain(self, t: float, node: int) -> bool:
        """Cordon ``node`` for ``drain_h`` after ``drain_errors`` errors within ``drain_window_h`` (0 = never), and
        with ``drain_flaky`` while its posterior odds of being flaky are at least that (extended by each error);
        whether it was drained now."""
        fc, errors = self.config.failures, self.cluster.errors
        assert fc is not None and self.faults is not None
        until = -np.inf
        if fc.drain_errors and not self.cluster.cordoned[node] and \
                errors.count(node, t - fc.drain_window_h * SECONDS_PER_HOUR) >= fc.drain_errors:
            until = t + fc.drain_h * SECONDS_PER_HOUR
        if fc.drain_flaky and errors.prior is not None:
            g = self.cluster.num_gpus[node]
            threshold = np.log(fc.drain_flaky / (1 - fc.drain_flaky))
            excess = float(errors.prior.log_odds(errors.count(node, -np.inf), g, t)) - threshold
            if excess >= 0 and (fading := float(errors.prior.fading(g))) > 0:
                until = max(until, t + excess / fading)
        if until <= self.cordon_until.get(node, t):
            return False
        drained = not self.cluster.cordoned[node]
        self.cluster.cordon(node)
        self.cordon_until[node] = until
        self.faults.hold(node, until)
        if fc.drain_lift:
            self.next_check[node] = t
            self.lift_check(t, node)
        return drained

    def lift_check(self, t: float, node: int) -> None:
        """``drain_lift``: the drained ``node`` takes pods while the longest-waiting pod has waited longer than
        :meth:`FailureConfig.lift_wait_s` of the node's posterior, else it is cordoned; checked again when that
        can change (at least a minute later), until its drain ends."""
        fc, ledger, faults, errors = self.config.failures, self.ledger, self.faults, self.cluster.errors
        assert fc is not None and ledger is not None and faults is not None and errors.prior is not None
        if self.next_check.get(node) != t or t >= self.cordon_until[node]:
            return  # superseded by a later drain's check, or the drain is over
        queued = np.flatnonzero(self.status == QUEUED)
        since = np.where(np.isfinite(ledger.killed_at[queued]), ledger.killed_at[queued], self.outcome.arrival[queued])
        oldest = int(np.argmin(since)) if len(queued) else -1
        waited = t - since[oldest] if len(queued) else 0.0
        run = ledger.left[queued[oldest]] if fc.drain_lift_run == "known" and len(queued) else self.mean_run_s
        log_odds = float(errors.prior.log_odds(errors.count(node, -np.inf), self.cluster.num_gpus[node], t))
        wait = fc.lift_wait_s(1 / (1 + np.exp(-log_odds)), run if np.isfinite(run) else np.inf)
        lift = len(queued) > 0 and waited >= wait
        if lift and self.cluster.cordoned[node]:
            self.cluster.uncordon(node)
            self.retry(t)
        elif not lift:
            self.cluster.cordon(node)
        after = wait if lift else wait - waited
        if np.isfinite(after) and t + after < self.cordon_until[node]:
            self.next_check[node] = t + max(after, 60.0)
            faults.check(node, self.next_check[node])
