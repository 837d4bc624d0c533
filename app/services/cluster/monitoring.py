"""What `/metrics` tells Prometheus (docs/admins/monitoring.md), every name
prefixed `divergent_`. The server runs as several processes beside the
reconciler, so nothing here is one process's memory: runs, queue waits and
spend are read from the database when scraped, the rest from what every
process shares (app/services/site/gauges.py)."""
from __future__ import annotations

import statistics
import time
from datetime import timedelta

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from divergent.app.extensions import db
from divergent.app.models import Org, Run, utcnow
from divergent.app.services.cluster.gpu_use import gpus_in_use
from divergent.app.services.money.usage import month_bounds
from divergent.app.services.site.gauges import (
    CYCLE_ENDED,
    CYCLE_SECONDS,
    CYCLES,
    SLURM_ERRORS,
    followers_now,
    gauges,
)

# Queue waits are summarised over the runs that started this recently.
WAIT_WINDOW = timedelta(hours=1)


class SiteCollector:
    """Collects at scrape time (prometheus_client's custom collector)."""

    def collect(self):
        yield self._runs()
        yield from self._queue()
        yield from self._reconciler()
        followers = GaugeMetricFamily("divergent_log_followers",
                                      "Log streams the server follows now (div logs -f, div run).")
        followers.add_metric([], followers_now())
        yield followers
        yield from self._spend()
        yield from self._gpu_use()
        errors = CounterMetricFamily("divergent_slurm_call_errors",
                                     "Slurm calls that failed (refused, timed out, not answered), "
                                     "by call.", labels=["call"])
        for name, value in gauges(SLURM_ERRORS):
            errors.add_metric([name.removeprefix(SLURM_ERRORS)], value)
        yield errors

    def _runs(self):
        runs = GaugeMetricFamily("divergent_runs", "Runs by status and GPU type (every org's).",
                                 labels=["status", "gpu"])
        for status, gpu, n in db.session.execute(
                sa.select(Run.status, Run.gpu_type, sa.func.count())
                .group_by(Run.status, Run.gpu_type).order_by(Run.status, Run.gpu_type)):
            runs.add_metric([status, gpu], n)
        return runs

    def _queue(self):
        now = utcnow()
        oldest = GaugeMetricFamily("divergent_queued_oldest_wait_seconds",
                                   "How long the longest-waiting queued run has waited, by GPU "
                                   "type.", labels=["gpu"])
        for gpu, created in db.session.execute(
                sa.select(Run.gpu_type, sa.func.min(Run.created_at))
                .where(Run.status == "queued").group_by(Run.gpu_type).order_by(Run.gpu_type)):
            oldest.add_metric([gpu], max(0.0, (now - created).total_seconds()))
        yield oldest
        waits = SummaryMetricFamily(
            "divergent_queue_wait_seconds",
            "Seconds from request to start of the runs that started in the last hour.")
        seconds = [max(0.0, (started - created).total_seconds())
                   for created, started in db.session.execute(
                       sa.select(Run.created_at, Run.started_at)
                       .where(Run.started_at >= now - WAIT_WINDOW))]
        waits.add_metric([], len(seconds), sum(seconds))
        yield waits
        median = GaugeMetricFamily("divergent_queue_wait_median_seconds",
                                   "The median of those waits (0 with none).")
        median.add_metric([], statistics.median(seconds) if seconds else 0.0)
        yield median

    def _reconciler(self):
        values = dict(gauges("reconciler_"))
        ended = values.get(CYCLE_ENDED)
        cycle = GaugeMetricFamily("divergent_reconciler_cycle_seconds",
                                  "How long the reconciler's last cycle took.")
        cycle.add_metric([], values.get(CYCLE_SECONDS, 0.0))
        yield cycle
        lag = GaugeMetricFamily("divergent_reconciler_lag_seconds",
                                "Seconds since the reconciler last finished a cycle (-1: never).")
        lag.add_metric([], -1.0 if ended is None else max(0.0, time.time() - ended))
        yield lag
        cycles = CounterMetricFamily("divergent_reconciler_cycles", "Reconciler cycles done.")
        cycles.add_metric([], values.get(CYCLES, 0.0))
        yield cycles

    def _spend(self):
        start, end, _ = month_bounds()
        spend = GaugeMetricFamily("divergent_spend_dollars",
                                  "What each org's runs cost this month (UTC), in dollars.",
                                  labels=["org"])
        limit = GaugeMetricFamily("divergent_spend_limit_dollars",
                                  "Each org's monthly limit, in dollars (orgs with one).",
                                  labels=["org"])
        spent = sa.select(sa.func.coalesce(sa.func.sum(Run.cost_micros), 0)).where(
            Run.org_id == Org.id, Run.created_at >= start, Run.created_at < end
        ).scalar_subquery()
        for name, micros, limit_micros in db.session.execute(
                sa.select(Org.name, spent, Org.monthly_limit_micros).order_by(Org.name)):
            spend.add_metric([name], int(micros) / 1e6)
            if limit_micros is not None:
                limit.add_metric([name], limit_micros / 1e6)
        yield spend
        yield limit

    def _gpu_use(self):
        allocated = GaugeMetricFamily("divergent_gpus_allocated",
                                      "GPUs running runs hold, by org and GPU type.",
                                      labels=["org", "gpu"])
        used = GaugeMetricFamily("divergent_gpus_used",
                                 "GPUs' worth of work they do, as the samplers last measured "
                                 "it (only where GPUs have telemetry).", labels=["org", "gpu"])
        for entry in gpus_in_use():
            allocated.add_metric([entry.org, entry.gpu], entry.allocated)
            if entry.used_gpus is not None:
                used.add_metric([entry.org, entry.gpu], entry.used_gpus)
        yield allocated
        yield used


def exposition() -> bytes:
    """The text Prometheus scrapes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SiteCollector())
    return generate_latest(registry)
