"""Owners in trouble are asked less often: health kept by the finish, the period stretched by the planner."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from synclane_provider.core import (
    DeclarationError,
    JobThrottled,
    Operations,
    OwnerBackoff,
    OwnerStretch,
    Page,
    Queue,
    WorkerSlot,
)
from tests.support.helpers import declare, orders, owners, paged, products, rows

MINUTE = timedelta(minutes=1)
UTC = timezone.utc


class Switch:
    """A handler that fails (or throttles) for the owners named in ``broken`` and completes for the others."""

    def __init__(self, *broken: str, throttle: bool = False) -> None:
        self.broken = set(broken)
        self.throttle = throttle
        self.calls: list[str] = []

    def __call__(self, job) -> Page:
        self.calls.append(job.owner)
        if job.owner in self.broken:
            raise JobThrottled("slow down") if self.throttle else PermissionError("401 token revoked")
        return paged(0)(job)


@pytest.fixture
def queue_of(schema, database_url, clock):
    made = []

    def make(*types, owner_source=None, **settings):
        declaration = declare(schema, *types, owner_source=owner_source, **settings)
        database = declaration.database(database_url)
        ops = Operations(declaration, database, clock=clock)
        slot = WorkerSlot(declaration, database, "shops", clock=clock)
        made.extend([ops, slot])
        return ops, slot

    yield make
    for made_one in made:
        made_one.close()


def owner_row(admin, schema, owner):
    return admin.execute(f'SELECT * FROM "{schema}".owners WHERE owner = %s', [owner]).fetchone()


def test_failed_attempts_of_an_owner_across_its_types_make_it_degraded_then_failing_and_a_completion_heals_it(
    queue_of, admin, schema, clock
):
    handler = Switch("acme")
    ops, slot = queue_of(
        products(handler),
        orders(handler, horizon=timedelta(days=1), slice=timedelta(days=1)),
        owner_source=owners("acme", "globex"),
        retry_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=1),
        owner_stretch=OwnerStretch(degraded_after=2, failing_after=4, max_stretch=8),
    )
    ops.plan("shops", now=clock.now)
    seen = []
    for _ in range(12):
        result = slot.run_one()
        if result is None:
            clock.advance(MINUTE)
            continue
        if result.job.owner == "acme":
            row = owner_row(admin, schema, "acme")
            seen.append((row["health"], row["consecutive_failures"]))
    types = {r["type"] for r in rows(admin, schema, "owner = 'acme' AND attempt_count > 0")}
    assert types == {"products", "orders"}, "failures of both types count"
    assert seen[:5] == [("healthy", 1), ("degraded", 2), ("degraded", 3), ("failing", 4), ("failing", 5)]
    failing = owner_row(admin, schema, "acme")
    assert failing["last_error"] == "PermissionError: 401 token revoked"
    assert failing["failing_since"] is not None and failing["last_clean_at"] is None
    clean = owner_row(admin, schema, "globex")
    assert (clean["health"], clean["consecutive_failures"], clean["last_clean_at"]) == (
        "healthy",
        0,
        clean["updated_at"],
    )

    handler.broken.clear()
    ops.requeue("shops", owner="acme")
    result = slot.run_one()
    assert result.job.owner == "acme" and result.outcome.value == "completed"
    healed = owner_row(admin, schema, "acme")
    assert (healed["health"], healed["consecutive_failures"], healed["failing_since"]) == ("healthy", 0, None)
    assert healed["last_clean_at"] == clock.now
    assert healed["last_error"] == "PermissionError: 401 token revoked", "the last error is kept for whoever looks"


def test_a_throttle_is_not_a_failure_of_the_owner(queue_of, admin, schema, clock):
    ops, slot = queue_of(products(Switch("acme", throttle=True)), owner_stretch=OwnerStretch(degraded_after=1))
    ops.plan("shops", now=clock.now)
    assert slot.run_one().outcome.value == "failed"
    assert owner_row(admin, schema, "acme") is None


def test_the_health_rule_in_the_table_is_the_declared_one(queue_of, admin, schema, clock):
    backoff = OwnerStretch(degraded_after=3, failing_after=5)
    ops, slot = queue_of(
        products(Switch("acme")), max_attempts=20, retry_delay=timedelta(seconds=1), owner_stretch=backoff
    )
    ops.plan("shops", now=clock.now)
    for failures in range(1, 8):
        clock.advance(MINUTE)
        slot.run_one()
        row = owner_row(admin, schema, "acme")
        assert (row["health"], row["consecutive_failures"]) == (backoff.health(failures).value, failures)


def test_a_failing_owner_is_planned_at_its_stretched_period_and_catches_up_at_once_when_it_heals(
    queue_of, admin, schema, clock
):
    """orders every 15 minutes, failing acme stretched ×4 (one hour); globex beside it keeps its period. When
    acme completes again, the next plan covers everything after its coverage up to the current period."""
    every = timedelta(minutes=15)
    ops, slot = queue_of(
        orders(horizon=timedelta(days=1), slice=timedelta(days=1), every=every, overlap=timedelta(0)),
        owner_source=owners("acme", "globex"),
        owner_stretch=OwnerStretch(degraded_after=1, failing_after=1, max_stretch=4),
    )
    admin.execute(
        f'INSERT INTO "{schema}".owners (queue, owner, health, consecutive_failures) VALUES '
        "('shops', 'acme', 'failing', 9)"
    )
    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # the clock stands at 10:20
    ends = {}
    for minutes in range(20, 125, 5):  # 10:20 … 12:00
        ops.plan("shops", now=start + timedelta(minutes=minutes))
    for owner in ("acme", "globex"):
        ends[owner] = sorted(r["window_end"] for r in rows(admin, schema, "owner = %s AND mode = 'recurring'", [owner]))
    hour = timedelta(hours=1)
    assert ends["globex"] == [start + k * every for k in range(1, 9)]  # 10:15 … 12:00
    assert ends["acme"] == [start, start + hour, start + 2 * hour]  # 10:00, 11:00, 12:00: 3 jobs, not 9

    admin.execute(f"UPDATE \"{schema}\".owners SET health = 'healthy', consecutive_failures = 0")
    assert ops.plan("shops", now=start + timedelta(minutes=135)).inserted == {"orders": 2}  # 12:15 for both
    windows = sorted(
        (r["window_start"], r["window_end"]) for r in rows(admin, schema, "owner = 'acme' AND mode = 'recurring'")
    )
    assert windows[-1] == (start + 2 * hour, start + 2 * hour + every)
    for earlier, later in zip(windows, windows[1:]):
        assert later[0] == earlier[1], "each window starts where the one before ended: none missing, none twice"


def test_no_stretch_when_the_queue_turns_it_off(queue_of, admin, schema, clock):
    ops, _ = queue_of(
        orders(horizon=timedelta(days=1), slice=timedelta(days=1)), owner_source=owners("acme"), owner_stretch=None
    )
    admin.execute(
        f'INSERT INTO "{schema}".owners (queue, owner, health, consecutive_failures) VALUES '
        "('shops', 'acme', 'failing', 30)"
    )
    ops.plan("shops", now=clock.now)
    assert ops.plan("shops", now=clock.now + timedelta(minutes=15)).inserted == {"orders": 1}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"degraded_after": 0}, "degraded_after of owner_stretch must be a whole number of at least 1, got 0"),
        ({"degraded_after": 5, "failing_after": 4}, r"failing_after of owner_stretch must be .* \(5\), got 4"),
        ({"max_stretch": 2.0}, r"max_stretch of owner_stretch must be a whole number from 1 \(no stretch\)"),
        ({"max_stretch": 4096}, r"max_stretch .* to 1024, got 4096"),
    ],
)
def test_a_bad_owner_stretch_is_refused_naming_the_value(settings, message):
    with pytest.raises(DeclarationError, match=message):
        OwnerStretch(**settings)


def test_a_queue_takes_an_owner_stretch_or_none(clock):
    assert Queue("shops", owners=owners(), types=[products()]).owner_stretch == OwnerStretch(3, 10, 16)
    assert Queue("shops", owners=owners(), types=[products()], owner_stretch=None).owner_stretch.max_stretch == 1
    with pytest.raises(DeclarationError, match=r"owner_stretch of queue 'shops' must be an OwnerStretch .* got 16"):
        Queue("shops", owners=owners(), types=[products()], owner_stretch=16)


def test_the_earlier_names_owner_backoff_and_OwnerBackoff_still_declare_the_stretch():
    """Declarations written before the rename keep working: ``OwnerBackoff`` is ``OwnerStretch``, and
    ``Queue(owner_backoff=...)`` sets ``owner_stretch``; giving both is refused rather than one silently winning."""
    assert OwnerBackoff is OwnerStretch
    assert Queue(
        "shops", owners=owners(), types=[products()], owner_backoff=OwnerBackoff(max_stretch=8)
    ).owner_stretch == (OwnerStretch(max_stretch=8))
    assert Queue("shops", owners=owners(), types=[products()], owner_backoff=None).owner_stretch.max_stretch == 1
    with pytest.raises(DeclarationError, match=r"owner_backoff of queue 'shops' must be an OwnerStretch .* got 16"):
        Queue("shops", owners=owners(), types=[products()], owner_backoff=16)
    with pytest.raises(DeclarationError, match="gives both owner_stretch and owner_backoff"):
        Queue("shops", owners=owners(), types=[products()], owner_stretch=None, owner_backoff=OwnerStretch())


class TypeSwitch:
    """A handler that fails for the job types named in ``broken`` and completes the others."""

    def __init__(self, *broken: str) -> None:
        self.broken = set(broken)

    def __call__(self, job) -> Page:
        if job.type in self.broken:
            raise PermissionError("401 token revoked")
        return paged(0)(job)


@pytest.mark.parametrize(
    ("failing_after", "health", "failing_since"),
    [(3, "degraded", False), (1, "failing", True)],
)
def test_with_degraded_after_one_an_owners_first_failure_makes_its_row_unhealthy(
    failing_after, health, failing_since, queue_of, admin, schema, clock
):
    """The owner has no row until its first attempt ends: the row that attempt makes follows the declared rule
    as a row already there would."""
    ops, slot = queue_of(
        products(Switch("acme")), owner_stretch=OwnerStretch(degraded_after=1, failing_after=failing_after)
    )
    ops.plan("shops", now=clock.now)
    assert owner_row(admin, schema, "acme") is None
    assert slot.run_one().outcome.value == "failed"
    row = owner_row(admin, schema, "acme")
    assert (row["health"], row["consecutive_failures"], row["last_error"]) == (
        health,
        1,
        "PermissionError: 401 token revoked",
    )
    assert row["failing_since"] == (clock.now if failing_since else None)


def test_failing_since_is_when_the_owner_turned_failing_not_its_latest_failure(queue_of, admin, schema, clock):
    ops, slot = queue_of(
        products(Switch("acme")),
        max_attempts=20,
        retry_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=1),
        owner_stretch=OwnerStretch(degraded_after=1, failing_after=2),
    )
    ops.plan("shops", now=clock.now)
    seen = []
    for _ in range(4):
        slot.run_one()
        row = owner_row(admin, schema, "acme")
        seen.append((row["health"], row["failing_since"]))
        clock.advance(MINUTE)
    turned = clock.now - 3 * MINUTE  # the second failure's time
    assert seen == [("degraded", None), ("failing", turned), ("failing", turned), ("failing", turned)]


def test_a_page_that_fails_after_a_cancel_is_not_a_failure_of_the_owner(queue_of, admin, schema, clock):
    """The account was disconnected while its page was in flight, and the page answered 401: the job ends as the
    cancel said, and the owner is not counted as failing (its access was withdrawn on purpose)."""
    cancels = []

    def disconnected_mid_page(job) -> Page:
        cancels.append(ops.cancel("shops", job.owner, "account disconnected", now=clock.now))
        raise PermissionError("401 token revoked")

    ops, slot = queue_of(products(disconnected_mid_page), owner_stretch=OwnerStretch(degraded_after=1))
    ops.plan("shops", now=clock.now)
    assert slot.run_one().outcome.value == "abandoned"
    assert [c.stopping for c in cancels] == [1]
    [job] = rows(admin, schema)
    assert (job["status"], job["error"]) == ("abandoned", "Cancelled: account disconnected")
    assert owner_row(admin, schema, "acme") is None


def test_a_completion_heals_a_degraded_owner_even_within_a_minute_of_its_last_clean_run(queue_of, admin, schema, clock):
    """A completion of an owner already healthy, clean within the last minute, writes nothing (so that a busy
    owner's finishes do not each rewrite its row); one of an owner with failures in a row always resets them."""
    handler = TypeSwitch("orders")
    ops, slot = queue_of(
        products(handler),
        orders(handler, horizon=timedelta(days=1), slice=timedelta(days=1)),
        retry_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=1),
        owner_stretch=OwnerStretch(degraded_after=1, failing_after=5),
    )
    ops.plan("shops", now=clock.now)
    assert slot.run_one().job.type == "products"
    clean = owner_row(admin, schema, "acme")
    assert (clean["health"], clean["last_clean_at"]) == ("healthy", clock.now)
    clock.advance(timedelta(seconds=10))
    assert slot.run_one().outcome.value == "failed"
    assert (owner_row(admin, schema, "acme")["health"], owner_row(admin, schema, "acme")["consecutive_failures"]) == (
        "degraded",
        1,
    )
    handler.broken.clear()
    clock.advance(timedelta(seconds=10))  # 20 s after the clean run
    assert slot.run_one().outcome.value == "completed"
    healed = owner_row(admin, schema, "acme")
    assert (healed["health"], healed["consecutive_failures"], healed["last_clean_at"]) == ("healthy", 0, clock.now)


def test_a_second_spell_of_failing_after_a_recovery_is_alerted_again(queue_of, admin, schema, clock):
    handler = Switch("acme")
    ops, slot = queue_of(
        products(handler),
        max_attempts=20,
        retry_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=1),
        owner_stretch=OwnerStretch(degraded_after=1, failing_after=1),
    )

    def alerted() -> list[tuple[str, str]]:
        report = ops.check_health("shops", abandoned_since=None, now=clock.now)
        return [(finding.problem.value, finding.owner) for finding in report.findings]

    ops.plan("shops", now=clock.now)
    assert slot.run_one().outcome.value == "failed"
    assert alerted() == [("failing", "acme")]
    clock.advance(MINUTE)
    assert slot.run_one().outcome.value == "failed"  # still the same spell: said once
    assert alerted() == []

    handler.broken.clear()
    clock.advance(MINUTE)
    assert slot.run_one().outcome.value == "completed"
    assert owner_row(admin, schema, "acme")["health"] == "healthy" and alerted() == []

    handler.broken.add("acme")
    clock.advance(timedelta(days=1))
    ops.plan("shops", now=clock.now)  # the next snapshot
    assert slot.run_one().outcome.value == "failed"
    assert owner_row(admin, schema, "acme")["failing_since"] == clock.now
    assert alerted() == [("failing", "acme")]
