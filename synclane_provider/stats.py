"""The engine's metrics, sent through Airflow's own ``Stats``: StatsD, Datadog or OpenTelemetry, as configured.

Airflow decides where metrics go (``[metrics] statsd_on``, ``otel_on``, …, with its prefix, allow and block
lists); the operators hand the engine an :class:`AirflowStats` and the engine's counts arrive there too. Each
metric is sent with its tags (see docs/metrics.md). Plain StatsD drops tags, so, as Airflow does for its own
metrics while ``[metrics] legacy_names_on`` is on (the default), the value is also sent under a name that
holds the tag values: ``synclane.jobs.finished.<queue>.<type>.<outcome>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta

from airflow.sdk import conf
from airflow.sdk.observability.stats import Stats, normalize_name_for_stats

from synclane_provider.core.metrics import Metric

log = logging.getLogger(__name__)


def flat_name(metric: Metric, tags: Mapping[str, str]) -> str:
    """The metric's name with its tag values appended in declared order, each made safe for a StatsD name.

    >>> from synclane_provider.core.metrics import JOBS_FINISHED
    >>> flat_name(JOBS_FINISHED, {"queue": "shops", "type": "orders.v2", "outcome": "completed"})
    'synclane.jobs.finished.shops.orders__v2.completed'
    """
    parts = [normalize_name_for_stats(str(tags[tag]), log_warning=False).replace(".", "__") for tag in metric.tags]
    return ".".join([metric.name, *parts])


class AirflowStats:
    """A :class:`~synclane_provider.core.metrics.Metrics` sink onto Airflow's ``Stats``. Never raises: a metric
    that cannot be sent is logged once and the sync goes on."""

    def __init__(self, *, flat_names: bool | None = None) -> None:
        self.flat_names = (
            conf.getboolean("metrics", "legacy_names_on", fallback=True) if flat_names is None else flat_names
        )
        self._failed = False

    def incr(self, metric: Metric, tags: Mapping[str, str], count: int = 1) -> None:
        self._send(lambda name, t: Stats.incr(name, count, tags=t), metric, tags)

    def timing(self, metric: Metric, tags: Mapping[str, str], seconds: float) -> None:
        self._send(lambda name, t: Stats.timing(name, timedelta(seconds=seconds), tags=t), metric, tags)

    def gauge(self, metric: Metric, tags: Mapping[str, str], value: float) -> None:
        self._send(lambda name, t: Stats.gauge(name, value, tags=t), metric, tags)

    def _send(
        self, send: Callable[[str, dict[str, str] | None], None], metric: Metric, tags: Mapping[str, str]
    ) -> None:
        try:
            send(metric.name, dict(tags))
            if self.flat_names:
                send(flat_name(metric, tags), None)
        except Exception as exc:  # noqa: BLE001 - metrics must never stop a sync
            if not self._failed:
                self._failed = True
                log.warning("could not send metric %s (%s); further failures are not logged", metric.name, exc)
