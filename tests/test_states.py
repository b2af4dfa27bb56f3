"""The job states in Python are the one source: the schema, the statements and the transitions are checked
against ``synclane_provider/core/states.py``.

* The CHECK constraints on ``status`` and ``mode``, the status default and the partial indexes' predicates of
  a freshly migrated table are read from the catalog and compared with ``JobStatus``, ``JobMode`` and the
  named sets (``WAITING`` …).
* Every status, mode and owner health (``OwnerHealth``) literal in the migrations, ``queries.sql`` and
  ``monitor.sql`` is found (``status = '…'``, ``status <> '…'``, ``SET status = '…'``, ``status IN (…)``,
  ``%(status)s = '…'``) and checked to be a member; every ``IN`` list must be one of the named sets. A state
  literal the patterns do not understand fails too, so a new way of writing a comparison cannot slip past.
* A trigger, installed in this test's schema only, records every change of status (or of the worker holding
  a job) while the real engine plans, takes, saves, fails, defers, abandons, throttles, completes, hands
  back, takes over an expired lease, requeues and cancels. Every recorded pair must be in
  ``ALLOWED_TRANSITIONS``, every allowed pair must be seen, and every statement of ``queries.sql`` that sets
  a status must have run.

Adding a status: one member of ``JobStatus`` (and of the sets it belongs to, and its transitions), one
migration replacing the ``jobs_status_is_known`` constraint (and the partial indexes, if it waits), and a step in
``test_every_transition_the_engine_performs_is_allowed_and_every_allowed_one_is_performed`` that performs
its transitions. These tests name every statement, index and pair still to update.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import (
    JobAbandoned,
    JobMode,
    JobStatus,
    JobThrottled,
    Operations,
    OwnerPaused,
    Page,
    WorkerPool,
    WorkerSlot,
)
from synclane_provider.core.db.queries import RULES, fragments_of, named_statements, statement
from synclane_provider.core.db.schema_versions import ensure_schema, shipped_migrations
from synclane_provider.core.db.store import Finish
from synclane_provider.core.states import (
    ALLOWED_TRANSITIONS,
    ATTEMPTS_SPENT,
    NOT_WAITING,
    STOPPED,
    UNSETTLED,
    WAITING,
    WAITING_IN_TURN,
    OwnerHealth,
)
from tests.support.helpers import declare, owners, products

PACKAGE = "synclane_provider.core.db"
STATUSES = {s.value for s in JobStatus}
MODES = {m.value for m in JobMode}
HEALTHS = {h.value for h in OwnerHealth}
MEMBERS = {"status": STATUSES, "mode": MODES, "health": HEALTHS}
"""The literals each state column may hold: a job's status and mode, an owner's health."""
NAMED_SETS = {
    "WAITING": frozenset(s.value for s in WAITING),
    "WAITING_IN_TURN": frozenset(s.value for s in WAITING_IN_TURN),
    "STOPPED": frozenset(s.value for s in STOPPED),
    "ATTEMPTS_SPENT": frozenset(s.value for s in ATTEMPTS_SPENT),
    "UNSETTLED": frozenset(s.value for s in UNSETTLED),
    "NOT_WAITING": frozenset(s.value for s in NOT_WAITING),
}
LIST_MEANINGS = {
    "requeue": {"STOPPED"},
    "resync_progress": {"STOPPED", "ATTEMPTS_SPENT"},
    "finish_and_take": {"WAITING", "WAITING_IN_TURN"},
    "take_many": {"WAITING", "WAITING_IN_TURN"},
    "take_lane_budget": {"WAITING_IN_TURN"},  # a lane's recurring job due, which a take would pick in its turn
    "abandon_job": {"UNSETTLED"},
    "cancel": {"UNSETTLED"},
    "move_lanes": {"NOT_WAITING"},
}
"""The named sets a statement's status lists may be; every other statement's lists are ``WAITING``."""


# --- reading state literals out of SQL -----------------------------------------------------------------------

_LITERAL = r"'(?:[^']|'')*'"
_COMMENT = re.compile(r"--[^\n]*")
_PATTERNS = {
    "in": re.compile(
        rf"\b(?:\w+\.)?(?P<column>status|mode|health)\s+(?:NOT\s+)?IN\s*\((?P<items>\s*{_LITERAL}(?:\s*,\s*{_LITERAL})*\s*)\)",
        re.I,
    ),
    "any": re.compile(
        rf"\b(?:\w+\.)?(?P<column>status|mode|health)\s*=\s*ANY\s*\(\s*ARRAY\s*\[(?P<items>\s*{_LITERAL}(?:\s*,\s*{_LITERAL})*\s*)\]\s*\)",
        re.I,
    ),
    "compare": re.compile(rf"\b(?:\w+\.)?(?P<column>status|mode|health)\s*(?:=|<>|!=)\s*(?P<items>{_LITERAL})", re.I),
    "compare_reversed": re.compile(
        rf"(?P<items>{_LITERAL})\s*(?:=|<>|!=)\s*(?:\w+\.)?(?P<column>status|mode|health)\b", re.I
    ),
    "parameter": re.compile(rf"%\((?P<column>status|mode)\)s\s*(?:=|<>|!=)\s*(?P<items>{_LITERAL})", re.I),
    "case": re.compile(
        rf"\bSET\s+(?P<column>status)\s*=\s*CASE\s+WHEN\s[^;]*?\sTHEN\s+"
        rf"(?P<items>{_LITERAL}(?:\s+ELSE\s+{_LITERAL})?)",
        re.I,
    ),
    "coalesce": re.compile(rf"\bcoalesce\(\s*(?:\w+\.)?(?P<column>health)\s*,\s*(?P<items>{_LITERAL})\s*\)", re.I),
    "default": re.compile(rf"\b(?P<column>status|mode|health)\s+text\b[^,;]*?\bDEFAULT\s+(?P<items>{_LITERAL})", re.I),
}


@dataclass(frozen=True)
class Use:
    """One place a SQL text compares a status (or mode) column with literals."""

    where: str
    column: str
    form: str
    values: tuple[str, ...]


def literals(text: str) -> list[str]:
    return [item[1:-1].replace("''", "'") for item in re.findall(_LITERAL, text)]


def state_uses(where: str, text: str) -> list[Use]:
    """Every comparison of ``status`` or ``mode`` with literals in ``text``; fails on a state literal elsewhere."""
    text = _COMMENT.sub("", text)
    uses, covered = [], set()
    for form, pattern in _PATTERNS.items():
        for match in pattern.finditer(text):
            start, end = match.span("items")
            if start in covered:
                continue
            covered.update(start + m.start() for m in re.finditer(_LITERAL, text[start:end]))
            uses.append(Use(where, match["column"].lower(), form, tuple(literals(match["items"]))))
    stray = [
        (m.group(0), text[max(0, m.start() - 40) : m.end()].replace("\n", " "))
        for m in re.finditer(_LITERAL, text)
        if m.start() not in covered and m.group(0)[1:-1] in STATUSES | MODES | HEALTHS
    ]
    assert stray == [], (
        f"{where}: state literals outside a comparison these tests understand (extend _PATTERNS): {stray}"
    )
    return uses


def queries() -> dict[str, str]:
    """The statements of ``queries.sql`` by name, as sent: each with its fragments in place (``finish_and_take``'s
    parts are fragments of their own), so that a literal in a fragment is checked in every statement using it."""
    return named_statements(PACKAGE, "queries.sql")


def monitor_statements() -> dict[str, str]:
    """The page's statements (``monitor.sql``) by name, as sent (with the rules they borrow from queries.sql)."""
    return named_statements(PACKAGE, "monitor.sql", borrowed=fragments_of(PACKAGE, RULES))


def check_members(uses: list[Use]) -> list[str]:
    problems = []
    for use in uses:
        members = MEMBERS[use.column]
        unknown = [value for value in use.values if value not in members]
        if unknown:
            problems.append(f"{use.where}: {use.column} {use.form} {use.values}: not a member: {unknown}")
    return problems


# --- the SQL text ------------------------------------------------------------------------------------------------


def test_the_literal_finder_sees_every_form_and_refuses_what_it_does_not_understand():
    found = state_uses(
        "sample",
        "SET status = 'failed' WHERE j.status IN ('pending', 'failed') AND status <> 'running' "
        "AND 'completed' = x.status AND CASE WHEN %(status)s = 'abandoned' END AND mode NOT IN ('manual') "
        "SET status = CASE WHEN stop_reason IS NOT NULL THEN 'abandoned' ELSE 'pending' END "
        "-- 'pendng' in a comment is prose",
    )
    assert [(u.form, u.values) for u in found] == [
        ("in", ("pending", "failed")),
        ("in", ("manual",)),
        ("compare", ("failed",)),
        ("compare", ("running",)),
        ("compare_reversed", ("completed",)),
        ("parameter", ("abandoned",)),
        ("case", ("abandoned", "pending")),
    ]
    assert check_members(state_uses("typo", "WHERE status = 'pendng'")) == [
        "typo: status compare ('pendng',): not a member: ['pendng']"
    ]
    with pytest.raises(AssertionError, match="outside a comparison"):
        state_uses("other form", "WHERE coalesce(status, 'pending') = 'x'")


def test_every_state_literal_in_the_statements_is_a_member_and_every_list_a_named_set():
    problems, lists = [], []
    for name, text in queries().items():
        uses = state_uses(f"queries.sql {name}", text)
        problems += check_members(uses)
        meanings = LIST_MEANINGS.get(name, {"WAITING"})
        for use in uses:
            if use.column == "status" and use.form in ("in", "any"):
                lists.append((name, use.values))
                if not any(set(use.values) == NAMED_SETS[meaning] for meaning in meanings):
                    problems.append(
                        f"queries.sql {name}: status IN {use.values} is not {' or '.join(sorted(meanings))}"
                    )
    assert problems == []
    assert {name for name, _ in lists} >= {"requeue", "cancel", "finish_and_take"}  # the finder finds the lists
    assert len(lists) >= 10


def test_every_state_and_health_literal_in_the_page_statements_is_a_member():
    """monitor.sql's statements, and every owner health literal in either file, are members too (OwnerHealth)."""
    problems, healths = [], set()
    for source, statements in (("queries.sql", queries()), ("monitor.sql", monitor_statements())):
        for name, text in statements.items():
            uses = state_uses(f"{source} {name}", text)
            problems += check_members(uses)
            healths |= {use.where for use in uses if use.column == "health"}
    assert problems == []
    assert healths >= {"monitor.sql owners", "queries.sql list_owners", "queries.sql owners_in_trouble"}
    assert check_members(state_uses("typo", "WHERE o.health <> 'helthy'")) == [
        "typo: health compare ('helthy',): not a member: ['helthy']"
    ]
    assert [(u.form, u.values) for u in state_uses("kept", "coalesce(state.health, 'healthy') AS health")] == [
        ("coalesce", ("healthy",))
    ]


def test_every_state_literal_in_the_migrations_is_a_member():
    problems = []
    for migration in shipped_migrations():
        problems += check_members(state_uses(f"migration {migration.label}", migration.text))
    assert problems == []


# --- the schema, from the catalog ---------------------------------------------------------------------------------


def values_in(definition: str) -> set[str]:
    """The literals of a catalog definition (``'pending'::text`` …)."""
    return set(literals(definition))


def test_the_table_checks_and_indexes_agree_with_the_python_sets(admin, database_url, fresh_schema):
    with psycopg.connect(database_url, autocommit=True) as conn:
        ensure_schema(conn, fresh_schema)
    checks = admin.execute(
        "SELECT conname, pg_get_constraintdef(oid) AS definition FROM pg_constraint "
        "WHERE conrelid = to_regclass(%s) AND contype = 'c'",
        [f"{sql.Identifier(fresh_schema).as_string(admin)}.jobs"],
    ).fetchall()
    by_name = {row["conname"]: row["definition"] for row in checks}
    assert values_in(by_name["jobs_status_is_known"]) == STATUSES
    assert values_in(by_name["jobs_mode_is_known"]) == MODES
    for name, definition in by_name.items():
        uses = state_uses(f"constraint {name}", definition.replace("::text", ""))
        assert check_members(uses) == []

    [default] = admin.execute(
        "SELECT column_default FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'jobs' AND column_name = 'status'",
        [fresh_schema],
    ).fetchall()
    assert values_in(default["column_default"]) == {JobStatus.PENDING.value}

    indexes = admin.execute(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = %s AND tablename = 'jobs' AND indexdef LIKE '%% WHERE %%'",
        [fresh_schema],
    ).fetchall()
    predicates = {row["indexname"]: values_in(row["indexdef"].split(" WHERE ", 1)[1]) for row in indexes}
    waiting = {name: found for name, found in predicates.items() if "waiting" in name}
    assert len(waiting) == 3 and all(found == NAMED_SETS["WAITING"] for found in waiting.values()), waiting
    assert predicates["jobs_one_running_per_lane_slot"] == {JobStatus.RUNNING.value}
    # Retention's and progress's indexes (migration 0006): finished jobs by state, initial jobs by mode.
    assert predicates["jobs_completed_by_age"] == {JobStatus.COMPLETED.value, JobMode.INITIAL.value}
    assert predicates["jobs_abandoned"] == {JobStatus.ABANDONED.value}
    assert predicates["jobs_initial_by_owner"] == {JobMode.INITIAL.value}
    # The operator's views (migration 0007): recent completions, manual jobs.
    assert predicates["jobs_completed_recently"] == {JobStatus.COMPLETED.value}
    assert predicates["jobs_manual"] == {JobMode.MANUAL.value}
    # Freshness (migration 0008): completed jobs by how far they reach.
    assert predicates["jobs_completed_reach"] == {JobStatus.COMPLETED.value}
    # A re-sync request's jobs (migration 0012): by the request's key, whatever their state.
    assert predicates["jobs_by_request"] == set()
    retention = {"jobs_completed_by_age", "jobs_abandoned", "jobs_initial_by_owner"}
    views = {"jobs_completed_recently", "jobs_manual", "jobs_completed_reach", "jobs_by_request"}
    assert set(predicates) == set(waiting) | {"jobs_one_running_per_lane_slot"} | retention | views


def test_the_transitions_cover_every_state_and_the_named_sets_are_states():
    assert set(ALLOWED_TRANSITIONS) == set(JobStatus)
    for members in NAMED_SETS.values():
        assert members <= STATUSES


# --- the transitions, recorded while the real engine works -----------------------------------------------------

RECORDER = """
CREATE TABLE {schema}.transitions (
    seq        bigserial PRIMARY KEY,
    job_id     bigint NOT NULL,
    old_status text,
    new_status text NOT NULL,
    old_worker text,
    new_worker text,
    query      text
);
CREATE FUNCTION {schema}.record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.transitions (job_id, old_status, new_status, old_worker, new_worker, query)
    VALUES (NEW.id,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.leased_by END, NEW.leased_by,
            current_query());
    RETURN NULL;
END $$;
CREATE TRIGGER record_insert AFTER INSERT ON {schema}.jobs
    FOR EACH ROW EXECUTE FUNCTION {schema}.record_transition();
CREATE TRIGGER record_update AFTER UPDATE ON {schema}.jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.leased_by IS DISTINCT FROM NEW.leased_by)
    EXECUTE FUNCTION {schema}.record_transition();
"""
"""Every insert, and every update that changes a job's status or the worker holding it (a take-over), with the
statement that did it. Installed in the test's own schema, never in a migration."""


class Script:
    """A handler that does, per owner, what the scenario says next: return a page or raise."""

    def __init__(self) -> None:
        self.steps: dict[str, list] = {}

    def __call__(self, job):
        steps = self.steps.get(job.owner) or [Page(None, 1)]
        step = steps.pop(0)
        if callable(step) and not isinstance(step, Page):
            step = step()
        if isinstance(step, BaseException):
            raise step
        return step


def test_every_transition_the_engine_performs_is_allowed_and_every_allowed_one_is_performed(
    admin, database_url, fresh_schema, clock
):
    with psycopg.connect(database_url, autocommit=True) as conn:
        ensure_schema(conn, fresh_schema)
        conn.execute(sql.SQL(RECORDER).format(schema=sql.Identifier(fresh_schema)).as_string(conn).encode())
    script = Script()
    synclane = declare(fresh_schema, products(script), owner_source=owners("planned"), max_attempts=2)
    database = synclane.database(database_url)
    ops = Operations(synclane, database)
    slot = WorkerSlot(synclane, database, "shops", clock=clock)
    slots = [slot]

    def enqueue(owner: str, *steps) -> None:
        script.steps[owner] = list(steps)
        assert ops.enqueue("shops", owner, "products", lane=owner, now=clock()) is not None

    def run(owner: str, outcome: str, on=slot) -> None:
        result = on.run_one(then_continue=False)
        assert (result.job.owner, result.outcome.value) == (owner, outcome)

    def later(minutes: float) -> None:
        clock.advance(timedelta(minutes=minutes))

    try:
        # plan, take, save a page, complete
        script.steps["planned"] = [Page("1", 10), Page(None, 5)]
        assert ops.plan("shops", now=clock()).total == 1
        run("planned", "completed")
        # fail, retry after the delay, defer when regular attempts are used up, a last attempt, abandon
        enqueue("flaky", RuntimeError("a"), RuntimeError("b"), RuntimeError("c"))
        run("flaky", "failed")
        later(2)
        run("flaky", "deferred")
        later(10)
        run("flaky", "abandoned")
        # the handler abandons; throttled, then done
        enqueue("quitter", JobAbandoned("access revoked"))
        run("quitter", "abandoned")
        # the handler pauses its owner: the job goes back to pending at its cursor, held until the owner resumes
        enqueue("revoked", OwnerPaused("token revoked"))
        run("revoked", "paused")
        enqueue("throttled", JobThrottled(retry_after=timedelta(seconds=30)), Page(None, 1))
        run("throttled", "failed")
        later(1)
        run("throttled", "completed")
        # cancel what failed, what is deferred, what was requeued; requeue failed and deferred jobs
        enqueue("gone-failed", RuntimeError("a"))
        run("gone-failed", "failed")
        assert ops.cancel("shops", "gone-failed", "disconnected").abandoned == 1
        enqueue("gone-deferred", RuntimeError("a"), RuntimeError("b"))
        run("gone-deferred", "failed")
        later(2)
        run("gone-deferred", "deferred")
        assert ops.cancel("shops", "gone-deferred", "disconnected").abandoned == 1
        enqueue("requeued-deferred", RuntimeError("a"), RuntimeError("b"))
        run("requeued-deferred", "failed")
        later(2)
        run("requeued-deferred", "deferred")
        assert ops.requeue("shops", owner="requeued-deferred", now=clock()) == 1
        assert ops.cancel("shops", "requeued-deferred", "disconnected").abandoned == 1
        enqueue("requeued-failed", RuntimeError("a"), Page(None, 1))
        run("requeued-failed", "failed")
        assert ops.requeue("shops", owner="requeued-failed", now=clock()) == 1
        run("requeued-failed", "completed")
        # a re-sync request: its failure requeued, then the whole request cancelled
        script.steps["planned"] = [RuntimeError("a"), RuntimeError("b")]
        ops.resync("shops", "products", clock() - timedelta(days=1), clock(), reason="again", key="again", now=clock())
        run("planned", "failed")
        assert ops.requeue("shops", request="again", now=clock()) == 1
        run("planned", "failed")
        assert ops.cancel("shops", request="again", now=clock()).abandoned == 1
        # a graceful stop hands the job back at its cursor
        stopping = WorkerSlot(synclane, database, "shops", clock=clock)
        slots.append(stopping)
        enqueue("stopped", lambda: stopping.stop.set() or Page("1", 1))
        run("stopped", "released", on=stopping)
        run("stopped", "completed")
        # the job taken as the last one finished is handed back unstarted
        enqueue("first")
        enqueue("second")
        result = slot.run_one(then_continue=True)
        assert (result.job.owner, slot.next_job.owner) == ("first", "second")
        slot.hand_back()
        run("second", "completed")
        # an expired lease is taken over by another worker
        enqueue("orphan")
        dying = WorkerSlot(synclane, database, "shops", clock=clock)
        slots.append(dying)
        assert dying.take().owner == "orphan"
        later(6)
        taken_over = slot.take()
        assert taken_over.owner == "orphan"
        assert slot.thread.run(slot.runner.run(taken_over)).outcome.value == "completed"
        # a worker process takes several jobs at once (take_many): an expired lease first, then a waiting job
        enqueue("batch-lost")
        enqueue("batch-waiting")
        assert dying.take().owner == "batch-lost"
        later(6)
        batch = slot.store.take_many(
            queue="shops", workers=["many-1", "many-2"], lease=timedelta(minutes=5), now=clock()
        )
        assert [(t.job.owner, t.job.leased_by) for t in batch] == [
            ("batch-lost", "many-1"),
            ("batch-waiting", "many-2"),
        ]
        # ... and writes the ends of their attempts together (finish_many)
        ends = [(each.job.leased_by, Finish(each.job.id, JobStatus.COMPLETED, 0)) for each in batch]
        finished = slot.store.finish_many(ends, queue="shops", now=clock())
        assert [written.status for written in finished.written] == [JobStatus.COMPLETED, JobStatus.COMPLETED]
        # an operator hands back a running job, and gives up on another
        held = WorkerSlot(synclane, database, "shops", clock=clock)
        slots.append(held)
        enqueue("stuck", Page(None, 1))
        stuck = held.take()
        assert stuck.owner == "stuck" and ops.release("shops", stuck.id, now=clock())
        run("stuck", "completed")
        enqueue("hopeless")
        hopeless = held.take()
        assert hopeless.owner == "hopeless" and ops.abandon("shops", hopeless.id, "the account is gone")
        # a job of a type no longer declared is abandoned
        admin.execute(
            sql.SQL(
                "INSERT INTO {}.jobs (queue, owner, lane, type, mode, dedup_key, next_run_at) "
                "VALUES ('shops', 'retired', 'retired', 'retired_type', 'manual', 'manual:x', %s)"
            ).format(sql.Identifier(fresh_schema)),
            [clock()],
        )
        run("retired", "abandoned")
        # a requeued abandoned job, drained by a pool
        assert ops.requeue("shops", owner="flaky", now=clock()) == 1
        enqueue("pooled")
        pool = WorkerPool(synclane, database, "shops", slots=2, clock=clock)
        try:
            assert pool.drain().outcomes == {"completed": 2}
        finally:
            pool.close()
    finally:
        for each in slots:
            each.close()
        ops.close()

    recorded = admin.execute(
        sql.SQL("SELECT old_status, new_status, old_worker, new_worker, query FROM {}.transitions ORDER BY seq").format(
            sql.Identifier(fresh_schema)
        )
    ).fetchall()
    names = {statement(name, fresh_schema).text.decode().strip(): name for name in queries()}

    def by(row) -> str:
        return names.get((row["query"] or "").strip(), "(by hand) " + " ".join((row["query"] or "").split())[:60])

    inserted = {(row["new_status"], by(row)) for row in recorded if row["old_status"] is None}
    assert {status for status, _ in inserted} == {JobStatus.PENDING.value}, inserted

    performed: dict[tuple[JobStatus, JobStatus], set[str]] = {}
    for row in recorded:
        if row["old_status"] is not None:
            pair = (JobStatus(row["old_status"]), JobStatus(row["new_status"]))
            performed.setdefault(pair, set()).add(by(row))
    allowed = {(old, new) for old, targets in ALLOWED_TRANSITIONS.items() for new in targets}
    not_allowed = {
        f"{old} -> {new} by {sorted(by_)}" for (old, new), by_ in performed.items() if (old, new) not in allowed
    }
    never = {f"{old} -> {new}" for old, new in allowed - set(performed)}
    assert not_allowed == set(), "performed but not in ALLOWED_TRANSITIONS"
    assert never == set(), "in ALLOWED_TRANSITIONS but never performed: perform it above, or remove it"

    takeovers = [r for r in recorded if r["old_status"] == r["new_status"] == "running"]
    assert takeovers and all(r["old_worker"] != r["new_worker"] for r in takeovers)

    setting_status = {name for name, text in queries().items() if re.search(r"\bSET\s+status\s*=", text, re.I)}
    ran = set().union(*performed.values())
    assert setting_status <= ran, f"statements that set a status but never ran here: {setting_status - ran}"
