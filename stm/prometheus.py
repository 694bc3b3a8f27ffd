"""A memory's metrics in Prometheus' text format (the optional ``metrics`` extra).

    pip install 'discord-stm[metrics]'

    from stm.prometheus import register
    register(memory)        # on prometheus_client's default registry
    # or: text = exposition(memory)  for a handler of your own

``prometheus_client`` is imported only when this module is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

from ._metrics import MetricsSnapshot

__all__ = ["MemoryCollector", "exposition", "register"]


def _client(module: str = "prometheus_client") -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            "Prometheus metrics need prometheus-client: pip install 'discord-stm[metrics]'"
        ) from exc


class MemoryCollector:
    """A Prometheus collector reading ``snapshot()`` (e.g. ``lambda: memory.metrics``)
    at every scrape."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot], prefix: str = "stm") -> None:
        self._snapshot = snapshot
        self._prefix = prefix
        _client()  # fail now, with the install hint, not at the first scrape

    def collect(self) -> Iterator[Any]:
        """The metric families of one snapshot."""
        core = _client("prometheus_client.core")
        m = self._snapshot()
        p = self._prefix

        def counter(name: str, doc: str, value: float) -> Any:
            return core.CounterMetricFamily(f"{p}_{name}", doc, value=value)

        def gauge(name: str, doc: str, value: float) -> Any:
            return core.GaugeMetricFamily(f"{p}_{name}", doc, value=value)

        yield counter("captures", "Turns captured into memory.", m.captures)
        yield counter("upgrades", "Summary upgrades committed.", m.upgrades)
        upgrade = core.SummaryMetricFamily(
            f"{p}_upgrade_seconds",
            "Time from the tool call to the upgrade's commit.",
            count_value=m.upgrades,
            sum_value=m.upgrade_seconds,
        )
        yield upgrade
        refusals = core.CounterMetricFamily(
            f"{p}_upgrade_refusals", "Tool calls answered success=False.", labels=["reason"]
        )
        for reason, count in sorted(m.refusals.items()):
            refusals.add_metric([reason], count)
        yield refusals
        yield counter("channel_clears", "Channel clears (/refresh).", m.channel_clears)
        yield counter("user_purges", "User purges.", m.user_purges)
        events = core.CounterMetricFamily(
            f"{p}_discord_events", "Discord events applied to the memory.", labels=["kind"]
        )
        for kind, count in sorted(m.discord_events.items()):
            events.add_metric([kind], count)
        yield events
        yield counter(
            "messages_deleted",
            "Messages removed from windows because they were deleted on Discord.",
            m.messages_deleted,
        )
        yield counter(
            "messages_edited",
            "Windows whose text a message edited on Discord replaced.",
            m.messages_edited,
        )
        yield counter(
            "purged_shared_entries",
            "Shared entries whose notes user purges cleared, beyond the users' own.",
            m.purged_shared_entries,
        )
        yield counter(
            "purges_over_threshold",
            "User purges that cleared more than the threshold share of a server's memory.",
            m.purges_over_threshold,
        )
        yield counter(
            "repeated_purges",
            "User purges by a member whose purges keep clearing shared notes in a server.",
            m.repeated_purges,
        )
        yield counter("janitor_passes", "Janitor passes.", m.janitor_passes)
        yield counter("hydrations", "Reads of durable rows into the cache.", m.hydrations)
        yield counter("hydrated_keys", "Scope keys read from the store.", m.hydrated_keys)
        yield counter("hydration_failures", "Reads that failed.", m.hydration_failures)
        yield gauge("cache_keys", "Scope keys held in the cache.", m.cache_keys)
        yield counter("cache_evictions", "Keys evicted from the full cache.", m.cache_evictions)
        yield gauge("writer_queue_depth", "Durable operations waiting.", m.writer_queue_depth)
        yield core.SummaryMetricFamily(
            f"{p}_writer_batch_ops",
            "Operations per committed transaction.",
            count_value=m.writer_batches,
            sum_value=m.writer_batch_ops,
        )
        yield gauge("writer_largest_batch", "Most ops in one commit.", m.writer_largest_batch)
        yield core.SummaryMetricFamily(
            f"{p}_commit_seconds",
            "Time spent in store transactions (failed ones too); count: commits.",
            count_value=m.writer_batches,
            sum_value=m.commit_seconds,
        )
        yield counter(
            "durable_write_failures", "Transactions that failed.", m.durable_write_failures
        )
        yield counter(
            "durable_write_retries", "Retries of deletes and write-behind.", m.durable_write_retries
        )
        if m.feed_lag_seconds is not None:
            yield gauge("feed_lag_seconds", "How far behind the change feed.", m.feed_lag_seconds)


def register(memory: Any, registry: Any = None, prefix: str = "stm") -> MemoryCollector:
    """Expose ``memory.metrics`` on ``registry`` (default: prometheus_client's own)."""
    collector = MemoryCollector(lambda: memory.metrics, prefix)
    (registry if registry is not None else _client().REGISTRY).register(collector)
    return collector


def exposition(memory: Any, prefix: str = "stm") -> str:
    """``memory.metrics`` in Prometheus' text exposition format."""
    client = _client()
    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(MemoryCollector(lambda: memory.metrics, prefix))
    return str(client.generate_latest(registry).decode())
