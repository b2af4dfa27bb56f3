"""Declarations fail when they are made, with the bad value in the message."""

from __future__ import annotations

from datetime import timedelta

import pytest

from synclane_provider.core import (
    DeclarationError,
    Owner,
    Queue,
    SnapshotType,
    SyncLane,
    UnknownQueueError,
    WindowedType,
)
from synclane_provider.core.errors import UnknownJobTypeError
from tests.support.helpers import orders, owners, paged, products

DAY = timedelta(days=1)


def test_defaults_are_the_documented_ones():
    queue = Queue("shops", owners=owners(), types=[products()])
    assert queue.concurrency == 1
    assert queue.max_attempts == 5
    assert queue.lease == timedelta(minutes=5)
    assert (queue.retry_delay, queue.retry_max_delay) == (timedelta(minutes=1), timedelta(hours=1))
    assert (queue.throttle_delay, queue.throttle_max_delay) == (timedelta(minutes=5), timedelta(minutes=30))
    lane = SyncLane(queues=[queue])
    assert (lane.schema, lane.create_schema) == ("synclane", True)
    assert (lane.plan_interval, lane.poll_interval) == (timedelta(minutes=1), timedelta(seconds=5))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("horizon", timedelta(0), "horizon of job type 'orders' must be positive, got 0 s"),
        ("slice", -DAY, "slice of job type 'orders' must be positive"),
        ("every", timedelta(0), "every of job type 'orders' must be positive"),
        (
            "slice",
            timedelta(days=61),
            "slice of job type 'orders' (61 days) must not be longer than its horizon (60 days)",
        ),
        (
            "overlap",
            timedelta(minutes=15),
            "overlap of job type 'orders' (15 min) must be shorter than its period (15 min)",
        ),
        ("overlap", -DAY, "overlap of job type 'orders' must be a timedelta of zero or more"),
        ("horizon", 60, "horizon of job type 'orders' must be a timedelta, got 60"),
    ],
)
def test_bad_windowed_type_names_the_value(field, value, message):
    with pytest.raises(DeclarationError) as caught:
        orders(**{field: value})
    assert message in str(caught.value)


def test_bad_snapshot_period():
    with pytest.raises(DeclarationError, match="every of job type 'products' must be positive"):
        SnapshotType("products", paged(0), every=timedelta(seconds=-1))


def test_handler_must_be_callable():
    with pytest.raises(DeclarationError, match="handler of job type 'products' must be callable, got 'nope'"):
        SnapshotType("products", "nope", every=DAY)


def test_duplicate_type_names():
    with pytest.raises(DeclarationError, match="job type 'orders' is declared twice in queue 'shops'"):
        Queue("shops", owners=owners(), types=[orders(), orders()])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"concurrency": 0}, "concurrency of queue 'shops' must be a positive integer, got 0"),
        ({"max_attempts": -1}, "queue 'shops': max_attempts must be a positive integer, got -1"),
        ({"max_attempts": True}, "queue 'shops': max_attempts must be a positive integer, got True"),
        ({"lease": timedelta(0)}, "lease of queue 'shops' must be positive"),
        ({"retry_delay": timedelta(hours=2)}, "queue 'shops': retry_max_delay (1 h) is shorter than retry_delay (2 h)"),
        (
            {"throttle_max_delay": timedelta(minutes=1)},
            "queue 'shops': throttle_max_delay (1 min) is shorter than throttle_delay (5 min)",
        ),
        ({"types": []}, "queue 'shops' declares no job types"),
        ({"owners": ["acme"]}, "owners of queue 'shops' must be callable"),
    ],
)
def test_bad_queue_settings(settings, message):
    arguments = {"owners": owners(), "types": [products()], **settings}
    with pytest.raises(DeclarationError) as caught:
        Queue("shops", **arguments)
    assert message in str(caught.value)


@pytest.mark.parametrize("name", ["", "   ", None, "a\x00b"])
def test_bad_queue_name(name):
    with pytest.raises(DeclarationError, match="queue name must"):
        Queue(name, owners=owners(), types=[products()])


def test_unknown_queue_lists_the_known_ones():
    lane = SyncLane(queues=[Queue("shops", owners=owners(), types=[products()])])
    with pytest.raises(UnknownQueueError, match=r"unknown queue 'shop' \(declared: 'shops'\)"):
        lane.queue("shop")


def test_unknown_job_type():
    queue = Queue("shops", owners=owners(), types=[products()])
    with pytest.raises(UnknownJobTypeError, match="queue 'shops' has no job type 'orders'"):
        queue.job_type("orders")


def test_duplicate_queue_names():
    queue = Queue("shops", owners=owners(), types=[products()])
    with pytest.raises(DeclarationError, match="queue 'shops' is declared twice"):
        SyncLane(queues=[queue, queue])


@pytest.mark.parametrize("schema", ["", "public; DROP TABLE x", "1abc", "a" * 64, 'we"ird', None])
def test_schema_must_be_an_identifier(schema):
    with pytest.raises(DeclarationError, match="schema must be a plain SQL identifier"):
        SyncLane(queues=[], schema=schema)


def test_types_keep_their_declared_order():
    queue = Queue("shops", owners=owners(), types=[products(), orders()])
    assert [queue.priority_of("products"), queue.priority_of("orders")] == [0, 1]
    assert isinstance(queue.job_type("orders"), WindowedType)


@pytest.mark.parametrize(
    ("every", "message"),
    [
        ([("orders", timedelta(minutes=1))], r"every of owner 'acme' must map job type names to periods"),
        ({"orders": 60}, r"every of owner 'acme' for job type 'orders' must be a timedelta, got 60"),
        ({"orders": timedelta(0)}, r"every of owner 'acme' for job type 'orders' must be positive, got 0 s"),
        ({"": timedelta(minutes=1)}, r"job type name in every of owner 'acme' must be a non-empty string"),
    ],
)
def test_an_owners_own_period_is_checked_when_the_owner_is_made(every, message):
    with pytest.raises(DeclarationError, match=message):
        Owner("acme", every=every)


def test_an_owners_own_periods_are_read_only_and_compare_by_value():
    periods = {"orders": timedelta(minutes=1)}
    owner = Owner("acme", every=periods)
    periods["orders"] = timedelta(hours=1)
    assert owner.every["orders"] == timedelta(minutes=1)
    with pytest.raises(TypeError):
        owner.every["orders"] = timedelta(hours=1)  # type: ignore[index]
    assert owner == Owner("acme", every={"orders": timedelta(minutes=1)})
    assert hash(owner) == hash(Owner("acme"))
    assert owner.period_of(orders()) == timedelta(minutes=1)
    assert Owner("acme").period_of(orders()) == orders().every
