"""Each queue/type is an Airflow Asset, so downstream DAGs run when its data lands.

URI scheme (registered with Airflow through the provider info's ``asset-uris``)::

    synclane://<schema>/<queue>/<type>        e.g.  synclane://synclane/shops/orders

The schema (the jobs table's, ``synclane`` by default) is the authority part, so two declarations in one
database do not share assets; queue and type names are percent-encoded, so any name the table accepts makes
one URI and back. A downstream DAG schedules on :func:`asset` (``schedule=[asset("synclane", "shops",
"orders")]``); :class:`~synclane_provider.operators.asset_events.SyncLaneAssetsOperator` (in the planning
DAG, every plan interval, from the table) or a single worker task with ``emit_assets=True`` (when it ends) emits
one event per type whose jobs completed, with ``extra`` naming the owners, their windows and record counts
(:meth:`Arrivals.extra <synclane_provider.core.run.arrivals.Arrivals.extra>`). Events go through an
:class:`AssetAlias` named by :func:`alias_name`, so a run in which nothing of a type completed emits nothing
for it. :func:`initial_load_asset` is the event-driven option: an asset watched on the triggerer.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult

from airflow.sdk import Asset, AssetAlias, AssetWatcher

from synclane_provider.core.run.arrivals import Arrivals
from synclane_provider.locate import locate_queue

if TYPE_CHECKING:
    from airflow.sdk import Context

SCHEME = "synclane"
INITIAL_LOAD = "initial-load"
"""The last path part of an initial-load asset: ``synclane://<schema>/<queue>/<type>/initial-load``."""


def asset_uri(schema: str, queue: str, type_name: str) -> str:
    """``synclane://<schema>/<queue>/<type>``, each name percent-encoded."""
    parts = (urllib.parse.quote(part, safe="") for part in (queue, type_name))
    return f"{SCHEME}://{urllib.parse.quote(schema, safe='')}/{'/'.join(parts)}"


def asset(schema: str, queue: str, type_name: str) -> Asset:
    """The Asset of one queue/type: what a downstream DAG schedules on."""
    return Asset(uri=asset_uri(schema, queue, type_name), name=f"{schema}.{queue}.{type_name}", group="synclane")


def initial_load_asset(
    schema: str, queue: str, type_name: str, *, synclane_conn_id: str = "synclane_default", poll_interval: float = 60.0
) -> Asset:
    """An asset whose events are owners completing their initial load of ``type_name``: the event-driven option.

    ``synclane://<schema>/<queue>/<type>/initial-load``, watched by an
    :class:`~synclane_provider.triggers.initial_load_watcher.InitialLoadsTrigger` on the triggerer (no task waits).
    A DAG with ``schedule=[initial_load_asset(...)]`` runs when an owner's first load lands; its triggering
    event's ``extra["payload"]["owners"]`` names the owners.
    """
    from synclane_provider.triggers.initial_load_watcher import InitialLoadsTrigger

    trigger = InitialLoadsTrigger(
        synclane_conn_id=synclane_conn_id, schema=schema, queue=queue, job_type=type_name, poll_interval=poll_interval
    )
    return Asset(
        uri=f"{asset_uri(schema, queue, type_name)}/{INITIAL_LOAD}",
        name=f"{schema}.{queue}.{type_name}.initial_load",
        group="synclane",
        watchers=[AssetWatcher(name=f"synclane-{queue}-{type_name}-initial-load", trigger=trigger)],
    )


def alias_name(queue: str) -> str:
    """The name of the asset alias a queue's worker tasks emit their events through."""
    return f"synclane-{queue}"


def alias(queue: str) -> AssetAlias:
    return AssetAlias(name=alias_name(queue), group="synclane")


def emit_arrivals(context: Context, synclane: str, queue_name: str, arrivals: Arrivals, log: Any) -> int:
    """Add one event per type in ``arrivals`` to the task's outlet alias of the queue; returns how many.

    A task without outlet events in its context (an ``execute()`` called outside a task) emits nothing.
    """
    accessors = context.get("outlet_events")
    if accessors is None or not arrivals.by_type:
        return 0
    declaration, queue = locate_queue(synclane, queue_name)
    events = accessors[alias(queue.name)]
    for type_name in sorted(arrivals.by_type):
        extra = arrivals.extra(queue.name, type_name)
        type_asset = asset(declaration.schema, queue.name, type_name)
        events.add(type_asset, extra=extra)
        log.info(
            "asset event %s: %s job(s), %s record(s) for %s owner(s)",
            type_asset.uri,
            extra["jobs"],
            extra["records"],
            len(extra["owners"]),
        )
    return len(arrivals.by_type)


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's check of a ``synclane://`` URI (``asset-uris`` handler): a schema and exactly queue/type,
    optionally followed by ``initial-load``.

    A malformed URI fails when the DAG naming it is parsed, not as a downstream DAG that never runs.
    """
    parts = [part for part in uri.path.split("/") if part]
    if len(parts) == 3 and parts[2] == INITIAL_LOAD:
        parts = parts[:2]
    if not uri.netloc or len(parts) != 2:
        raise ValueError(
            f"a SyncLane asset URI is synclane://<schema>/<queue>/<type> (or .../<type>/{INITIAL_LOAD}), got {urllib.parse.urlunsplit(uri)!r}"
        )
    return uri
