"""Prometheus metrics of a running daemon (`elasticd start --metrics-port P`).

Counters and histograms are updated where things happen, on the event loop; the gauges
(jobs by state, nodes by state) are refreshed from the core once a second on the loop, so
the HTTP thread of prometheus_client never reads the daemon's own structures. Names
(README: Metrics):

    elastic_jobs{state}                      jobs known to the daemon, by state
    elastic_nodes{state}                     nodes: idle, allocated, down
    elastic_resizes_total{outcome,cause}     settled orders: shrunk, grown, refused, deferred,
                                             deadline_missed, order_failed; who asked
    elastic_grows_failed_total               grows undone after `grown`: their new processes did not
                                             start, their hosts given back (history grow_failed)
    elastic_order_seconds                    order sent -> settled (histogram)
    elastic_launch_seconds                   launch of a job's processes (histogram)
    elastic_journal_commit_seconds           journal commits (histogram)
    elastic_submitted_total                  jobs accepted
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server
from prometheus_client import Counter as PCounter

if TYPE_CHECKING:
    from elasticd.core.engine import Core

RESIZE_OUTCOMES = frozenset({"shrunk", "grown", "refused", "deferred", "deadline_missed", "order_failed"})
JOB_STATES = ("PENDING", "RUNNING", "RESIZING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
NODE_STATES = ("idle", "allocated", "down")
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("elastic_jobs", "jobs known to the daemon, by state", ["state"], registry=r)
        self.nodes = Gauge("elastic_nodes", "nodes by state", ["state"], registry=r)
        self.resizes = PCounter("elastic_resizes", "settled resize orders, by outcome and who asked",
                                ["outcome", "cause"], registry=r)
        self.submitted = PCounter("elastic_submitted", "jobs accepted", registry=r)
        # Not a resize outcome: the grow was settled (`grown`) before it was undone.
        self.grows_failed = PCounter("elastic_grows_failed", "grows the application took (grown) whose new processes "
                                     "did not start: their hosts given back", registry=r)
        self.order_seconds = Histogram("elastic_order_seconds", "order sent to settled", buckets=_LATENCY, registry=r)
        self.launch_seconds = Histogram("elastic_launch_seconds", "starting a job's processes", buckets=_LATENCY,
                                        registry=r)
        self.commit_seconds = Histogram("elastic_journal_commit_seconds", "journal commits",
                                        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
                                        registry=r)
        self.allocation_node_seconds = Gauge(
            "elastic_allocation_node_seconds", "node-seconds of the Slurm allocation: held, used by jobs, given back "
            "(with --release-idle / --grow-allocation)", ["kind"], registry=r)
        self._seen: dict[int, int] = {}  # job -> events already counted

    def count_from_now(self, core: Core) -> None:
        """Count only what happens from now on: a restarted daemon takes its jobs back with
        their histories, and counting those again showed, across the restart, a burst of
        resizes that had happened before it (a new process's counters start at zero, which
        Prometheus reads as a reset)."""
        self._seen = {jid: len(job.events) for jid, job in core.jobs.items()}

    def serve(self, host: str, port: int) -> int:
        """Listen in a thread of prometheus_client's; the port really bound."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_address[1])

    def refresh(self, core: Core, allocation: Mapping[str, float] | None = None) -> None:
        """Gauges from the core (on the loop), and the resize outcomes (and grows undone)
        recorded since last time."""
        if allocation is not None:
            for kind in ("held", "used", "given_back"):
                self.allocation_node_seconds.labels(kind=kind).set(allocation[kind])
        states = Counter(j.state.value for j in core.jobs.values())
        for s in JOB_STATES:
            self.jobs.labels(state=s).set(states.get(s, 0))
        nodes = Counter(core.nodes.state_of(n).value for n in core.nodes.members)
        for s in NODE_STATES:
            self.nodes.labels(state=s).set(nodes.get(s, 0))
        for jid, job in core.jobs.items():
            seen = self._seen.get(jid, 0)
            for e in job.events[seen:]:
                if e.event in RESIZE_OUTCOMES:
                    self.resizes.labels(outcome=str(e.event), cause=str(e.cause or "daemon")).inc()
                elif e.event == "grow_failed":
                    self.grows_failed.inc()
            self._seen[jid] = len(job.events)
