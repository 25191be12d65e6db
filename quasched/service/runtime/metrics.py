"""Prometheus metrics of one service (its own registry, so several apps can live in one process).

Gauges are read from the controller when ``/metrics`` is scraped; counters
follow the events the service persists; histograms time scheduling passes
and HTTP requests (by route template, not by URL).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from quasched.service.domain import Event, JobState, Reason
from quasched.service.executor.gpustate import THROTTLE_BITS, GpuReading

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from quasched.service.loop.controller import Controller

DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
FINISHED = {s.value for s in JobState if s.finished}


class ServiceMetrics:
    """The service's Prometheus metrics in a registry of their own (rendered at ``/metrics``)."""
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.gpu_allocation = Gauge("quasched_gpu_allocation_percent", "GPU milli allocated / GPU capacity, %",
                                    registry=r)
        self.fragmentation = Gauge("quasched_gpu_fragmentation_percent",
                                   "Fragmented share of idle GPU milli for the typical pods, %", registry=r)
        self.pending = Gauge("quasched_pending_jobs", "Pending jobs by reason", ["reason"], registry=r)
        self.running = Gauge("quasched_running_jobs", "Jobs holding resources (running or preempting)", registry=r)
        self.nodes = Gauge("quasched_nodes", "Registered nodes by state", ["state"], registry=r)
        self.gpus = Gauge("quasched_gpus", "GPU devices of registered nodes", registry=r)
        self.decision = Histogram("quasched_scheduling_decision_seconds",
                                  "Wall time of one scheduling pass (cycle or tick)", buckets=DECISION_BUCKETS,
                                  registry=r)
        self.request = Histogram("quasched_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route", "status"], buckets=REQUEST_BUCKETS, registry=r)
        self.submit_group = Histogram("quasched_submission_group_size", "Submissions stored and scheduled together "
                                      "(one transaction, one cycle)", buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.submitted = Counter("quasched_jobs_submitted", "Jobs submitted", ["team"], registry=r)
        self.started = Counter("quasched_jobs_started", "Job starts (a requeued job starts again)", ["team"],
                               registry=r)
        self.finished = Counter("quasched_jobs_finished", "Jobs finished, by final state", ["state"], registry=r)
        self.preempted = Counter("quasched_jobs_preempted", "Jobs stopped by preemption", registry=r)
        # the GPUs' live state, named as NVIDIA's DCGM exporter names its fields
        labels = ["gpu", "Hostname", "modelName"]
        self.gpu_state = {key: Gauge(name, text, labels, registry=r) for key, name, text in (
            ("temperature_c", "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (C)"),
            ("power_w", "DCGM_FI_DEV_POWER_USAGE", "Power draw (W)"),
            ("power_limit_w", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "Enforced power limit (W)"),
            ("utilization_pct", "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (%)"),
            ("memory_used_mib", "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (MiB)"),
            ("ecc_uncorrected", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Uncorrected (double-bit) ECC errors, volatile"))}
        self.gpu_throttle = Gauge("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Clock-throttle reasons (NVML's bit mask)",
                                  labels, registry=r)
        self.gpu_avoided = Gauge("quasched_gpu_avoided", "1 while new pods avoid the device for its live state",
                                 labels, registry=r)
        for reason in Reason:
            self.pending.labels(reason.value)
        for state in sorted(FINISHED):
            self.finished.labels(state)

    def gpus_read(self, node: str, model: str, readings: Iterable[GpuReading], avoided: Iterable[int]) -> None:
        """Export one node's latest GPU readings (a field a device does not report is left out)."""
        avoided = set(avoided)
        for reading in readings:
            labels = (str(reading.device), node, model)
            for key, gauge in self.gpu_state.items():
                value = getattr(reading, key)
                if value is not None:
                    gauge.labels(*labels).set(value)
            self.gpu_throttle.labels(*labels).set(sum(THROTTLE_BITS[t] for t in reading.throttle))
            self.gpu_avoided.labels(*labels).set(reading.device in avoided)

    def count(self, events: Iterable[Event], teams: dict[int, str]) -> None:
        """Advance the counters by persisted events (``teams``: job id → team)."""
        for ev in events:
            team = teams.get(ev.job_id, "") if ev.job_id is not None else ""
            if ev.kind == "submitted":
                self.submitted.labels(team).inc()
            elif ev.kind == "started":
                self.started.labels(team).inc()
            elif ev.kind in FINISHED:
                self.finished.labels(ev.kind).inc()
            elif ev.kind == "preempted":
                self.preempted.inc()

    def refresh(self, ctl: Controller) -> None:
        """Set the gauges from the controller's state (call under the service lock)."""
        c = ctl.cluster
        self.gpu_allocation.set(ctl.gpu_allocation())
        self.fragmentation.set(ctl.fragmentation())
        pending = dict.fromkeys((r.value for r in Reason), 0)
        running = 0
        for job in ctl.jobs.values():
            if job.state == JobState.PENDING:
                code = job.reason.code.value if job.reason is not None else Reason.QUEUED.value
                pending[code] = pending.get(code, 0) + 1
            elif job.state.holds_resources:
                running += 1
        for code, n in pending.items():
            self.pending.labels(code).set(n)
        self.running.set(running)
        cordoned = int((c.present & c.cordoned).sum())
        self.nodes.labels("schedulable").set(int(c.present.sum()) - cordoned)
        self.nodes.labels("cordoned").set(cordoned)
        self.gpus.set(c.total_gpus)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """ASGI middleware observing each HTTP request's latency by method, route template and status."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, skip: tuple[str, ...] = ()) -> None:
        self.app, self.metrics, self.skip = app, metrics, skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").endswith(self.skip):
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.request.labels(scope.get("method", ""), template, str(status)).observe(
                time.perf_counter() - start)
