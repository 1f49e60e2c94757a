"""Prometheus metrics of `lyasched serve` (``--metrics-port``, or ``[metrics] port``).

`ServiceMetrics` keeps its own `CollectorRegistry` (never prometheus_client's global one, so two
services in one process, or tests, do not share values) and is updated once per slot from what
the slot already computed and recorded: its `SlotReport` and the decision rows of its
`SlotContext` (the row of the ``slots`` table and its ``decisions``, lyasched.store.records).
It never calls Slurm. `Service.slot_hooks` calls `ServiceMetrics.observe_slot` after each slot
is recorded; `serve` starts the HTTP endpoint (`start`). docs/service.md, Monitoring.

Values of a slot that failed (Slurm did not answer, or an internal error) count in the slot,
error and duration metrics and the last-slot time; the queue gauges (waiting, running, Q, Z, free
GPUs) keep the last successful slot's values (a failed slot records zeros, which are not the queue).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from lyasched.live.context import SlotContext

log = logging.getLogger("lyasched.metrics")

PREFIX = "lyasched"
ROLES = ("active", "standby")  # the role gauge: `ServiceMetrics.set_role`, or `follow_role` (serve: `service_role`)
# slot durations (s): from a few ms (short queues) to past the default 30 s slot
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def move_kind(decision: dict) -> str | None:
    """The kind of a signalled move's decision row (lyasched.live.mover: action ``move``, reason
    ``KIND: ...``, KIND shrink, grow, resize or suspend), else None."""
    if decision.get("action") != "move":
        return None
    return str(decision.get("reason") or "").split(":", 1)[0].strip() or "unknown"


def slurm_errors(ctx: SlotContext, slurm_failed: bool) -> int:
    """Slurm errors of one slot: the slot itself when Slurm did not answer, plus each start whose
    ``scontrol update`` or ``release`` failed (decision rows with action ``failed``)."""
    return int(slurm_failed) + sum(1 for d in ctx.decisions if d.get("action") == "failed")


def service_role(service: Any) -> str:
    """A `Service`'s role now: active while it holds the lease (lyasched.live.lease), or has none;
    else standby (``serve --standby`` waiting, or an active service that lost the lease)."""
    lease = getattr(service, "lease", None)
    return "active" if lease is None or lease.epoch is not None else "standby"


class _Role:
    """The role gauge, one series per role (1 for the current one), read at each scrape."""

    def __init__(self) -> None:
        self.role = "active"
        self.source: Callable[[], str] | None = None

    def collect(self) -> Iterator[Metric]:
        role = self.role
        if self.source is not None:
            try:
                role = self.source()
            except Exception:  # noqa: BLE001 - a scrape must not fail for it
                log.exception("metrics: role source failed")
        fam = GaugeMetricFamily(f"{PREFIX}_role", "This service's role: active (holds the lease and schedules) "
                                "or standby (waits).", labels=[f"{PREFIX}_role"])
        for r in ROLES:
            fam.add_metric([r], 1.0 if r == role else 0.0)
        yield fam


class ServiceMetrics:
    """The service's metrics on a registry of their own (``registry``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r, p = self.registry, PREFIX
        self.slot_duration = Histogram(f"{p}_slot_duration_seconds", "How long a slot took (recorded duration).",
                                       buckets=DURATION_BUCKETS, registry=r)
        self.slots = Counter(f"{p}_slots", "Slots run (recorded), failed ones included.", registry=r)
        self.slot_errors = Counter(f"{p}_slot_errors", "Slots that failed (Slurm did not answer, or an internal error).",
                                   registry=r)
        self.slurm_errors = Counter(f"{p}_slurm_errors", "Slurm errors: slots Slurm failed, and starts whose "
                                    "scontrol update/release failed.", registry=r)
        self.started = Counter(f"{p}_jobs_started", "Jobs started (resized and released) by the service.", registry=r)
        self.moves = Counter(f"{p}_moves", "Moves of running checkpointable jobs signalled, by kind.", ["kind"],
                             registry=r)
        self.waiting = Gauge(f"{p}_jobs_waiting", "Held jobs waiting for a start (last successful slot).", registry=r)
        self.running = Gauge(f"{p}_jobs_running", "Jobs released or running (last successful slot).", registry=r)
        self.q = Gauge(f"{p}_queue_q_seconds", "Q: estimated compute time of the waiting jobs, after the slot's "
                       "decisions (s; 0 when nothing was decided).", registry=r)
        self.z = Gauge(f"{p}_queue_z_seconds", "Z: the virtual queue of accumulated waiting time, after the slot's "
                       "decisions (s; 0 when nothing was decided).", registry=r)
        self.free_gpus = Gauge(f"{p}_free_gpus", "Free GPUs seen by the last successful slot.", registry=r)
        self.last_slot = Gauge(f"{p}_last_slot_timestamp_seconds", "Unix time of the last recorded slot "
                               "(its start, the slots table's time column).", registry=r)
        self.last_ok = Gauge(f"{p}_last_successful_slot_timestamp_seconds", "Unix time of the last slot "
                             "recorded without an error.", registry=r)
        self._role = _Role()
        r.register(self._role)  # a collector: collect() at each scrape
        for kind in ("shrink", "grow", "resize", "suspend"):  # series exist (at 0) before the first move
            self.moves.labels(kind=kind)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def set_role(self, role: str) -> None:
        """Set the role gauge (one of `ROLES`; without `follow_role`)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        self._role.role = role

    def follow_role(self, source: Callable[[], str]) -> None:
        """Read the role from ``source()`` at each scrape (serve: `service_role` of its service)."""
        self._role.source = source

    def observe_slot(self, ctx: SlotContext, slurm_failed: bool) -> None:
        """One recorded slot (`Service.slot_hooks`): its report and decision rows."""
        report = ctx.report
        self.slots.inc()
        self.slot_duration.observe(report.duration)
        self.last_slot.set(report.time)
        if report.error:
            self.slot_errors.inc()
        if n := slurm_errors(ctx, slurm_failed):
            self.slurm_errors.inc(n)
        if report.started:
            self.started.inc(len(report.started))
        for d in ctx.decisions:
            if (kind := move_kind(d)) is not None:
                self.moves.labels(kind=kind).inc()
        if report.error:
            return
        self.last_ok.set(report.time)
        self.waiting.set(report.waiting)
        self.running.set(report.running)
        self.q.set(report.q)
        self.z.set(report.z)
        self.free_gpus.set(sum(report.free.values()))

    # ------------------------------------------------------------ the HTTP endpoint

    def start(self, port: int, address: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``address:port`` in a daemon thread; returns the bound port (``port``
        0: a free one). Raises OSError when it cannot bind."""
        self._server, self._thread = start_http_server(port, addr=address, registry=self.registry)
        bound = int(self._server.server_address[1])
        log.info("metrics: http://%s:%d/metrics", address, bound)
        return bound

    def stop(self) -> None:
        """Stop the HTTP endpoint (if started)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
