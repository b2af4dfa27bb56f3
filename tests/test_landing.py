"""Landing pages of records in a PostgreSQL table: the version guard, change detection, and the checks at first use.

Every write to the target table is counted by a trigger (one row per tuple written), so "writes nothing" is
seen, not inferred from the counts the landing reports.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from synclane_provider.core.errors import DeclarationError, LandingError
from synclane_provider.core.land.destination import Destination, LandCounts
from synclane_provider.core.records import Job
from synclane_provider.core.states import JobMode, JobStatus

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


def job_of(owner: str) -> Job:
    return Job(
        id=1, queue="q", owner=owner, lane=owner, type="items", mode=JobMode.RECURRING, status=JobStatus.RUNNING,
        priority=0, window_start=None, window_end=None, dedup_key="k", cursor=None, processed_count=0,
        attempt_count=1, error=None, next_run_at=T0, leased_by="w", lease_expires_at=None, created_at=T0,
        started_at=T0, heartbeat_at=None, completed_at=None, stop_reason=None,
    )  # fmt: skip


ACME = job_of("acme")


@pytest.fixture
def items(landing_schema: str, database_url: str) -> Iterator[Destination]:
    dest = Destination(
        f"{landing_schema}.items", key=("account", "id"), owner="account", version="updated_at", conninfo=database_url
    )
    yield dest
    dest.close()


def item(id: int, version: int, name: str = "n", price: int = 1) -> dict[str, Any]:
    return {"id": id, "updated_at": T0 + timedelta(minutes=version), "name": name, "price": price}


def stored(admin: psycopg.Connection, schema: str) -> dict[int, tuple[int, str, int]]:
    rows = admin.execute(
        sql.SQL("SELECT id, updated_at, name, price FROM {}.items").format(sql.Identifier(schema))
    ).fetchall()
    return {r["id"]: (int((r["updated_at"] - T0) / timedelta(minutes=1)), r["name"], r["price"]) for r in rows}


def writes(admin: psycopg.Connection, schema: str) -> int:
    found = admin.execute(sql.SQL("SELECT count(*) AS n FROM {}.writes").format(sql.Identifier(schema))).fetchone()
    assert found is not None
    return int(found["n"])


def test_a_page_landed_again_writes_nothing(items, admin, landing_schema):
    page = [item(i, 1) for i in range(50)]
    assert items.land(ACME, page) == LandCounts(inserted=50)
    assert writes(admin, landing_schema) == 50
    assert items.land(ACME, page) == LandCounts(unchanged=50)
    assert writes(admin, landing_schema) == 50  # no tuple written: no trigger fired
    assert items.land(ACME, [item(0, 2, name="renamed"), item(1, 1)]) == LandCounts(updated=1, unchanged=1)
    assert writes(admin, landing_schema) == 51


def test_an_older_row_is_not_written_and_counted_stale(items, admin, landing_schema):
    items.land(ACME, [item(1, 5, name="new"), item(2, 5)])
    counts = items.land(ACME, [item(1, 4, name="old"), item(2, 6, name="newer"), item(3, 1)])
    assert counts == LandCounts(inserted=1, updated=1, stale=1)
    assert stored(admin, landing_schema) == {1: (5, "new", 1), 2: (6, "newer", 1), 3: (1, "n", 1)}


def test_of_one_key_twice_in_a_page_the_newest_lands_and_the_other_is_stale(items, admin, landing_schema):
    counts = items.land(ACME, [item(1, 3, name="newest"), item(1, 2, name="older"), item(1, 1)])
    assert counts == LandCounts(inserted=1, stale=2)
    assert stored(admin, landing_schema) == {1: (3, "newest", 1)}


def test_the_owner_column_is_the_jobs_owner(items, admin, landing_schema):
    items.land(job_of("globex"), [item(1, 1)])
    items.land(ACME, [item(1, 1)])
    owners = admin.execute(sql.SQL("SELECT account FROM {}.items ORDER BY 1").format(sql.Identifier(landing_schema)))
    assert [r["account"] for r in owners] == ["acme", "globex"]
    with pytest.raises(LandingError, match="row 1 has account='globex', not the job's owner 'acme'"):
        items.land(ACME, [{**item(1, 1), "account": "globex"}])
    with pytest.raises(LandingError, match="row 2 has account=7, not the job's owner 'acme'"):
        items.land(ACME, [{**item(1, 1), "account": "acme"}, {**item(2, 1), "account": 7}])


def test_without_content_comparison_an_equal_row_is_written_again(landing_schema, database_url, admin):
    dest = Destination(f"{landing_schema}.items", key=("account", "id"), owner="account", compare=False,
                       conninfo=database_url)  # fmt: skip
    try:
        dest.land(ACME, [item(1, 1)])
        assert dest.land(ACME, [item(1, 1)]) == LandCounts(updated=1)
        assert writes(admin, landing_schema) == 2
    finally:
        dest.close()


def test_an_unchanged_or_stale_row_is_not_even_locked(items, landing_schema, database_url):
    """A row the guard refuses is left alone: landing it does not wait on another transaction that holds it."""
    items.land(ACME, [item(1, 2), item(2, 1)])
    with psycopg.connect(database_url) as other:
        other.execute(sql.SQL("SELECT FROM {} FOR UPDATE").format(sql.Identifier(landing_schema, "items")))
        landed: list[LandCounts] = []
        landing = threading.Thread(target=lambda: landed.append(items.land(ACME, [item(1, 1), item(2, 1)])))
        landing.start()
        landing.join(5)
        held = landing.is_alive()
        other.rollback()
        landing.join(10)
    assert not held
    assert landed == [LandCounts(unchanged=1, stale=1)]


def test_a_key_another_transaction_inserts_meanwhile_is_upserted_not_refused(
    items, admin, landing_schema, database_url
):
    """The page's new keys are inserted without ON CONFLICT: one that another transaction inserts after the page
    looked (uncommitted then, committed while the page waits on it) still lands by the guard, and counts."""
    items.land(ACME, [item(1, 1)])
    with psycopg.connect(database_url) as other:
        other.execute(
            sql.SQL("INSERT INTO {} VALUES ('acme', 2, %s, 'theirs', 1), ('acme', 3, %s, 'theirs', 1)").format(
                sql.Identifier(landing_schema, "items")
            ),
            [T0 + timedelta(minutes=5), T0 + timedelta(minutes=1)],
        )
        landed: list[LandCounts] = []
        page = [item(1, 1), item(2, 3, name="ours"), item(3, 2, name="ours"), item(4, 1)]
        landing = threading.Thread(target=lambda: landed.append(items.land(ACME, page)))
        landing.start()
        landing.join(0.5)
        assert landing.is_alive()  # waiting on the other transaction's keys
        other.commit()
        landing.join(10)
    assert landed == [LandCounts(inserted=1, updated=1, unchanged=1, stale=1)]
    assert stored(admin, landing_schema) == {1: (1, "n", 1), 2: (5, "theirs", 1), 3: (2, "ours", 1), 4: (1, "n", 1)}
    assert writes(admin, landing_schema) == 1 + 2 + 2  # the first page, theirs, and ours: 3 updated, 4 inserted


def tuples_written(conn: psycopg.Connection, table: str) -> int:
    """Tuples this transaction wrote to ``table``, those of an undone copy too (the statistics count them)."""
    query = "SELECT pg_stat_get_xact_tuples_inserted({0}::regclass) + pg_stat_get_xact_tuples_updated({0}::regclass)"
    found = conn.execute(sql.SQL(query).format(sql.Literal(table))).fetchone()
    assert found is not None
    return int(found[0])


def test_a_stored_key_inside_a_new_page_s_range_keeps_the_page_from_being_copied(items, landing_schema, database_url):
    """After a page of new keys, the next is copied only when no stored key lies between its least and greatest
    key, wherever in the page the stored one is: here key 50 sits mid-page, neither first nor last, and the
    page's other 20 keys are new. The page goes through the guarded statement; not a tuple is written and undone."""
    name = f"{landing_schema}.items"
    with psycopg.connect(database_url) as conn:
        with conn.transaction():
            assert items.write(conn, [item(50, 1)], owner="acme") == LandCounts(inserted=1)
        with conn.transaction():
            before = tuples_written(conn, name)
            # Out of order, as an API may send them: the first and last keys (55, 60) do not span 50; the least and
            # greatest (40, 60) do.
            page = [item(i, 1) for i in (55, *range(40, 55), *range(56, 61))]
            assert items.write(conn, page, owner="acme") == LandCounts(inserted=20, unchanged=1)
            assert tuples_written(conn, name) - before == 20


def test_a_key_the_client_cannot_bound_is_looked_at_with_the_server_s_bounds(landing_schema, admin, database_url):
    """A numeric key: Python's order of its values is not known to be the index's, so a page of new keys sends its
    keys and the server takes the page's bounds before the copy; landed again, it writes no tuple."""
    table = f"{landing_schema}.amounts"
    admin.execute(
        sql.SQL("CREATE TABLE {} (id numeric PRIMARY KEY, name text NOT NULL)").format(
            sql.Identifier(landing_schema, "amounts")
        )
    )
    amounts = Destination(table, key="id")
    pages = [[{"id": Decimal(f"{i}.5"), "name": "n"} for i in range(start, start + 10)] for start in (0, 10)]
    with psycopg.connect(database_url) as conn:
        for page in pages:
            with conn.transaction():
                assert amounts.write(conn, page, owner=None) == LandCounts(inserted=10)
        for page in pages:
            with conn.transaction():
                before = tuples_written(conn, table)
                assert amounts.write(conn, page, owner=None) == LandCounts(unchanged=10)
                assert tuples_written(conn, table) - before == 0


@pytest.fixture
def linguistic_database(database_url: str) -> Iterator[str]:
    """A database of its own whose collation orders strings as people read them (ICU, en-US), not by code point."""
    name = f"synclane_test_icu_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'").format(
                sql.Identifier(name)
            )
        )
    try:
        yield psycopg.conninfo.make_conninfo(database_url, dbname=name)
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_strings_under_a_linguistic_collation_are_bounded_by_the_server(linguistic_database):
    """In en-US "a" sorts before "B"; by code point after. A page ["B", "a", "c"] after a page that stored "a": its
    bounds taken as Python compares would miss the stored "a", and the copy would write tuples only to undo them.
    The server takes them instead, finds "a", and the page goes through the guarded statement."""
    table = "public.words"
    words = Destination(table, key="word")
    with psycopg.connect(linguistic_database) as conn:
        conn.execute("CREATE TABLE public.words (word text PRIMARY KEY, n integer NOT NULL)")
        with conn.transaction():
            assert words.write(conn, [{"word": "a", "n": 1}], owner=None) == LandCounts(inserted=1)
        with conn.transaction():
            before = tuples_written(conn, table)
            page = [{"word": "B", "n": 1}, {"word": "a", "n": 1}, {"word": "c", "n": 1}]
            assert words.write(conn, page, owner=None) == LandCounts(inserted=2, unchanged=1)
            assert tuples_written(conn, table) - before == 2


def test_a_first_landing_is_copied_and_a_page_landed_again_writes_no_tuple_even_undone(
    items, landing_schema, database_url
):
    """A page of new keys in order is copied into the table; landed again, its rows are found stored before anything
    is written: not a tuple inserted, not even one undone (the statistics count those too, as they are written)."""
    table, name = sql.Identifier(landing_schema, "items"), f"{landing_schema}.items"

    pages = [[item(i, 1) for i in range(start, start + 20)] for start in (0, 20, 40)]
    with psycopg.connect(database_url) as conn:
        for page in pages:
            with conn.transaction():
                before = tuples_written(conn, name)
                assert items.write(conn, page, owner="acme") == LandCounts(inserted=20)
                assert tuples_written(conn, name) - before == 20
        for page in [*pages, [item(i, 1) for i in range(15, 45)]]:
            with conn.transaction():
                before = tuples_written(conn, name)
                assert items.write(conn, page, owner="acme") == LandCounts(unchanged=len(page))
                assert tuples_written(conn, name) - before == 0
        with conn.transaction():  # new keys within the range of stored ones: each row probed, the new one inserted
            before = tuples_written(conn, name)
            counts = items.write(conn, [item(10, 1), {**item(21, 1), "id": 1000}, item(59, 2)], owner="acme")
            assert counts == LandCounts(inserted=1, updated=1, unchanged=1)
            assert tuples_written(conn, name) - before == 2
        # Times as ISO strings: the page is not copied but landed by one statement, which looks at its range first
        # when the page before was all new keys.
        as_text = [{**item(i, 1), "updated_at": (T0 + timedelta(minutes=1)).isoformat()} for i in range(100, 105)]
        for expected in (LandCounts(inserted=5), LandCounts(unchanged=5)):
            with conn.transaction():
                before = tuples_written(conn, name)
                assert items.write(conn, as_text, owner="acme") == expected
                assert tuples_written(conn, name) - before == expected.inserted
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (66,)


def test_landed_in_another_database_a_page_landed_again_writes_no_tuple_even_undone(
    landing_schema, database_url, admin
):
    """A page landed in another database is committed by the statement that writes it, with no savepoint to undo
    a copy to: the look at its range still keeps a page of stored keys from being copied and undone. The server's
    statistics count every tuple written, those of an undone copy too."""
    with psycopg.connect(database_url, autocommit=True) as own:
        items = Destination(
            f"{landing_schema}.items", key=("account", "id"), owner="account", version="updated_at", connect=lambda: own
        )

        def tuples_written() -> int:
            own.execute("SELECT pg_stat_force_next_flush()")  # its statistics are in before it answers
            admin.execute("SELECT pg_stat_clear_snapshot()")
            query = "SELECT n_tup_ins + n_tup_upd + n_tup_del AS n FROM pg_stat_user_tables WHERE relid = %s::regclass"
            found = admin.execute(query, [f'"{landing_schema}".items']).fetchone()
            assert found is not None
            return int(found["n"])

        pages = [[item(i, 1) for i in range(start, start + 20)] for start in (0, 20, 40)]
        for page in pages:
            assert items.land(ACME, page) == LandCounts(inserted=20)
        assert tuples_written() == 60
        for page in pages:
            assert items.land(ACME, page) == LandCounts(unchanged=20)
        assert tuples_written() == 60
        assert writes(admin, landing_schema) == 60


def in_a_transaction_of_the_caller(items: Destination, database_url: str, page: list[dict[str, Any]]) -> LandCounts:
    """The page written in a transaction that wrote before it (item 9) and commits after it."""
    with psycopg.connect(database_url) as conn:
        with conn.transaction():
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES ('acme', 9, %s, 'before', 1)").format(
                    sql.Identifier(*items.table.split("."))
                ),
                [T0],
            )
            return items.write(conn, page, owner="acme")


@pytest.mark.parametrize("in_transaction", [False, True], ids=["a statement of its own", "the caller's transaction"])
def test_a_key_another_transaction_inserts_while_a_page_of_new_keys_is_copied_lands_by_the_guard(
    items, admin, landing_schema, database_url, in_transaction
):
    """The copy of a page of new keys meets a key another transaction inserted (uncommitted when the page looked at
    its range): the copy is undone and the page lands by the guard, its other rows inserted. Arrivals in another
    database, the copy is a statement of its own, undone whole; written in the caller's transaction, it is undone
    to a savepoint, and what the transaction wrote before it stays."""
    with psycopg.connect(database_url) as other:
        other.execute(
            sql.SQL("INSERT INTO {} VALUES ('acme', 2, %s, 'theirs', 1)").format(
                sql.Identifier(landing_schema, "items")
            ),
            [T0 + timedelta(minutes=5)],
        )
        landed: list[LandCounts] = []
        page = [item(1, 1), item(2, 3, name="ours"), item(3, 1)]
        land = (
            (lambda: in_a_transaction_of_the_caller(items, database_url, page))
            if in_transaction
            else (lambda: items.land(ACME, page))
        )
        landing = threading.Thread(target=lambda: landed.append(land()))
        landing.start()
        landing.join(0.5)
        assert landing.is_alive()  # the copy waits on the other transaction's key
        other.commit()
        landing.join(10)
    assert landed == [LandCounts(inserted=2, stale=1)]
    before = {9: (0, "before", 1)} if in_transaction else {}
    assert stored(admin, landing_schema) == {1: (1, "n", 1), 2: (5, "theirs", 1), 3: (1, "n", 1), **before}
    assert writes(admin, landing_schema) == 1 + 2 + len(before)  # theirs, and our two new keys once each


def test_a_row_a_trigger_skips_is_counted_as_left_alone_whether_copied_or_not(items, admin, landing_schema):
    admin.execute(
        sql.SQL(
            "CREATE FUNCTION {0}.skip() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN IF NEW.name = 'skip' THEN RETURN NULL; END IF; RETURN NEW; END $$;"
            " CREATE TRIGGER skip BEFORE INSERT ON {0}.items FOR EACH ROW EXECUTE FUNCTION {0}.skip()"
        ).format(sql.Identifier(landing_schema))
    )
    assert items.land(ACME, [item(1, 1), item(2, 1, name="skip")]) == LandCounts(inserted=1, unchanged=1)  # copied
    assert items.land(ACME, [item(0, 1), item(3, 1, name="skip")]) == LandCounts(inserted=1, unchanged=1)
    assert stored(admin, landing_schema) == {0: (1, "n", 1), 1: (1, "n", 1)}


@pytest.mark.parametrize("row", [item(2**31, 1), item(2, 1, price=2**31), item(2, 1, price=-(2**31) - 1)])
def test_an_integer_out_of_the_columns_range_is_refused_not_wrapped(items, admin, landing_schema, row):
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        items.land(ACME, [item(1, 1), row])
    assert stored(admin, landing_schema) == {}


def test_values_as_an_api_gives_them_land_as_the_columns_types(landing_schema, database_url, admin):
    table = sql.Identifier(landing_schema, "typed")
    admin.execute(
        sql.SQL(
            "CREATE TABLE {} (id integer PRIMARY KEY, at timestamptz, amount numeric(10, 2), qty integer,"
            " tags text[], code varchar(3))"
        ).format(table)
    )
    dest = Destination(f"{landing_schema}.typed", key="id", conninfo=database_url)
    at = datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    try:
        page = [  # times as ISO strings or datetimes, numbers as strings or numbers: a column of mixed kinds
            {"id": 1, "at": "2026-12-01T10:00:00Z", "amount": "12.50", "qty": 3, "tags": ["a", "b"], "code": "abc"},
            {"id": 2, "at": at, "amount": Decimal("1.5"), "qty": "4", "tags": None, "code": None},
            {"id": 3, "at": None, "amount": 7, "qty": None, "tags": [], "code": "x"},
        ]
        assert dest.land(ACME, page) == LandCounts(inserted=3)
        found = admin.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(table)).fetchall()
        assert [tuple(r.values()) for r in found] == [
            (1, at, Decimal("12.50"), 3, ["a", "b"], "abc"),
            (2, at, Decimal("1.50"), 4, None, None),
            (3, None, Decimal("7.00"), None, [], "x"),
        ]
        assert dest.land(ACME, [{**row, "at": at if row["at"] else None} for row in page]) == LandCounts(unchanged=3)
        assert dest.land(ACME, [{**page[0], "tags": "{c,d}"}]) == LandCounts(updated=1)  # an array as text
        assert admin.execute(sql.SQL("SELECT tags FROM {} WHERE id = 1").format(table)).fetchone() == {
            "tags": ["c", "d"]
        }
        with pytest.raises(psycopg.errors.StringDataRightTruncation):  # the column's length holds, as in an insert
            dest.land(ACME, [{**page[0], "code": "abcd"}])
    finally:
        dest.close()


@pytest.mark.parametrize(
    ("ddl", "complaint"),
    [
        ("ALTER TABLE {t} DROP CONSTRAINT items_pkey", r"has no unique index on the key \(account, id\)"),
        ("ALTER TABLE {t} DROP COLUMN updated_at", r"has no column 'updated_at'"),
        ("DROP TABLE {t}", r"table .*items does not exist"),
    ],
)
def test_the_first_page_refuses_a_table_without_what_the_declaration_needs(
    items, admin, landing_schema, ddl, complaint
):
    admin.execute(sql.SQL(ddl).format(t=sql.Identifier(landing_schema, "items")))
    with pytest.raises(LandingError, match=complaint):
        items.land(ACME, [item(1, 1)])


def test_a_unique_index_on_other_columns_or_a_partial_one_is_not_enough(items, admin, landing_schema):
    t = sql.Identifier(landing_schema, "items")
    admin.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT items_pkey").format(t))
    admin.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (id)").format(t))
    admin.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (account, id) WHERE price > 0").format(t))
    with pytest.raises(LandingError, match="no unique index on the key"):
        items.land(ACME, [item(1, 1)])


@pytest.mark.parametrize(
    "other",
    [
        {"id": 2, "updated_at": T0, "name": "n", "colour": "red"},  # as wide as the first, one column in its stead
        {"id": 2, "updated_at": T0, "name": "n", "price": 1, "colour": "red"},  # one column more
        {"id": 2, "updated_at": T0, "name": "n"},  # one column fewer
    ],
    ids=["another-column", "one-more", "one-fewer"],
)
def test_a_row_whose_columns_differ_from_the_first_row_s_is_refused_by_its_number(items, admin, landing_schema, other):
    with pytest.raises(LandingError, match=r"row 2 has columns \[.*\], the first row \["):
        items.land(ACME, [item(1, 1), other])
    assert writes(admin, landing_schema) == 0


def test_a_row_naming_a_column_the_table_lacks_or_without_a_version_is_refused(items):
    with pytest.raises(LandingError, match="has no column 'colour'"):
        items.land(ACME, [{**item(1, 1), "colour": "red"}])
    with pytest.raises(LandingError, match=r"row 2 \(key \('acme', 2\)\) has no 'updated_at'"):
        items.land(ACME, [item(1, 1), {**item(2, 1), "updated_at": None}])


@pytest.mark.parametrize(
    ("kwargs", "complaint"),
    [
        ({"table": "a.b.c", "key": ("id",)}, "table must be 'name' or 'schema.name', not 'a.b.c'"),
        ({"table": "t", "key": ()}, "key must be one or more distinct column names"),
        ({"table": "t", "key": ("id", "id")}, "key must be one or more distinct column names"),
        ({"table": "t", "key": ("id",), "version": "id"}, "the version column 'id' cannot be part of the key"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused_when_made(kwargs, complaint):
    with pytest.raises(DeclarationError, match=complaint):
        Destination(**kwargs)


# The property: whatever pages arrive in whatever order, the table holds per key the newest version seen (of
# equal versions, the last one landed), every row the guard refused is counted and wrote nothing, and a row
# equal to the one stored writes nothing.

rows_strategy = st.fixed_dictionaries(
    {"id": st.integers(0, 6), "version": st.integers(0, 3), "name": st.sampled_from(["a", "b"]),
     "price": st.integers(0, 1)}
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pages=st.lists(st.lists(rows_strategy, max_size=6), min_size=1, max_size=5))
def test_property_the_table_holds_the_newest_and_equal_rows_write_nothing(pages, items, admin, landing_schema):
    admin.execute(sql.SQL("TRUNCATE {0}.items, {0}.writes").format(sql.Identifier(landing_schema)))
    model: dict[int, tuple[int, str, int]] = {}
    for page in pages:
        expected = LandCounts()
        newest: dict[int, dict[str, Any]] = {}
        for row in page:  # within a page, the newest of a key (the later of a tie) is the one landed
            if row["id"] not in newest or row["version"] >= newest[row["id"]]["version"]:
                newest[row["id"]] = row
        expected += LandCounts(stale=len(page) - len(newest))
        for row in newest.values():
            value = (row["version"], row["name"], row["price"])
            if row["id"] not in model:
                expected += LandCounts(inserted=1)
            elif row["version"] < model[row["id"]][0]:
                expected += LandCounts(stale=1)
                continue
            elif value == model[row["id"]]:
                expected += LandCounts(unchanged=1)
                continue
            else:
                expected += LandCounts(updated=1)
            model[row["id"]] = value
        before = writes(admin, landing_schema)
        counts = items.land(ACME, [item(r["id"], r["version"], r["name"], r["price"]) for r in page])
        assert counts == expected
        assert writes(admin, landing_schema) - before == counts.inserted + counts.updated
    assert stored(admin, landing_schema) == model


JSON_TABLE = r"""
CREATE TABLE {schema}.docs (id integer PRIMARY KEY, doc jsonb, score jsonb);
CREATE TABLE {schema}.doc_writes (statement text NOT NULL);
CREATE FUNCTION {schema}.note_doc_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.doc_writes VALUES (
        CASE WHEN current_query() ~ '^(\s*--[^\n]*\n)*\s*COPY ' THEN 'COPY' ELSE 'statement' END
    );
    RETURN NULL;
END $$;
CREATE TRIGGER note_doc_write AFTER INSERT OR UPDATE ON {schema}.docs
    FOR EACH ROW EXECUTE FUNCTION {schema}.note_doc_write();
"""
"""A destination with jsonb columns, and what wrote each of its rows: a COPY, or a statement."""


@pytest.mark.parametrize("in_transaction", [False, True], ids=["a statement of its own", "the caller's transaction"])
def test_a_json_list_or_object_lands_in_a_jsonb_column_copied_or_by_the_statement(
    landing_schema, database_url, admin, in_transaction
):
    """What json.load gives (a list, an object, a number) lands in a jsonb column as that JSON: copied in a first
    landing, by the statement when the page is landed again, changed, or holds JSON text beside objects."""
    admin.execute(sql.SQL(JSON_TABLE).format(schema=sql.Identifier(landing_schema)).as_string(admin).encode())
    docs = Destination(f"{landing_schema}.docs", key="id", conninfo=database_url)

    def land(page: list[dict[str, Any]]) -> tuple[LandCounts, set[str]]:
        admin.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(landing_schema, "doc_writes")))
        if in_transaction:
            with psycopg.connect(database_url) as conn, conn.transaction():
                counts = docs.write(conn, page, owner=None)
        else:
            counts = docs.land(ACME, page)
        written = admin.execute(
            sql.SQL("SELECT statement FROM {}").format(sql.Identifier(landing_schema, "doc_writes"))
        )
        return counts, {r["statement"] for r in written}

    def stored_docs() -> dict[int, tuple[Any, Any]]:
        found = admin.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(sql.Identifier(landing_schema, "docs")))
        return {r["id"]: (r["doc"], r["score"]) for r in found}

    try:
        first = [
            {"id": 1, "doc": {"colours": ["red", "blue"], "size": {"w": 2}}, "score": 3},
            {"id": 2, "doc": ["red", "blue"], "score": None},
            {"id": 3, "doc": None, "score": [0.5, True]},
        ]
        assert land(first) == (LandCounts(inserted=3), {"COPY"})
        assert land(first) == (LandCounts(unchanged=3), set())
        changed = [{**first[0], "doc": {"colours": ["red"]}}, {**first[1], "score": {"n": 1}}, {"id": 4, "doc": []}]
        assert land([{**row, "score": row.get("score")} for row in changed]) == (
            LandCounts(inserted=1, updated=2),
            {"statement"},
        )
        as_text = [{"id": 5, "doc": '{"a": [1, 2]}', "score": None}, {"id": 6, "doc": {"b": "2"}, "score": None}]
        assert land(as_text) == (
            LandCounts(inserted=2),
            {"statement"},
        )  # JSON text, as json.dumps gives it, beside objects
        assert stored_docs() == {
            1: ({"colours": ["red"]}, 3),
            2: (["red", "blue"], {"n": 1}),
            3: (None, [0.5, True]),
            4: ([], None),
            5: ({"a": [1, 2]}, None),
            6: ({"b": "2"}, None),
        }
    finally:
        docs.close()


def test_a_list_lands_in_an_array_column_and_as_json_beside_it_in_a_json_column(landing_schema, database_url, admin):
    """The column's type decides: the same list is a text[] in an array column and a JSON array in a json or jsonb
    one, in the statement's path (a page with an array column is never copied) and in a snapshot's."""
    table = sql.Identifier(landing_schema, "tagged")
    admin.execute(
        sql.SQL(
            "CREATE TABLE {} (account text, id integer, tags text[], doc jsonb, raw json, PRIMARY KEY (account, id))"
        ).format(table)
    )
    plain = Destination(f"{landing_schema}.tagged", key=("account", "id"), owner="account", compare=False,
                        conninfo=database_url)  # fmt: skip
    snapshot = Destination(f"{landing_schema}.tagged", key=("account", "id"), owner="account", compare=False,
                           deletions="delete", conninfo=database_url)  # fmt: skip
    try:
        colours = ["red", "blue"]
        assert plain.land(ACME, [{"id": 1, "tags": colours, "doc": colours, "raw": {"c": colours}}]).inserted == 1
        assert snapshot.land(ACME, [{"id": 2, "tags": colours, "doc": {"c": colours}, "raw": colours}]).inserted == 1
        assert plain.land(ACME, [{"id": 1, "tags": ["red"], "doc": ["red"], "raw": {"c": ["red"]}}]).updated == 1
        found = admin.execute(sql.SQL("SELECT id, tags, doc, raw FROM {} ORDER BY id").format(table)).fetchall()
        assert [tuple(r.values()) for r in found] == [
            (1, ["red"], ["red"], {"c": ["red"]}),
            (2, colours, {"c": colours}, colours),
        ]
    finally:
        plain.close()
        snapshot.close()
