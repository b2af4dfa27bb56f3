"""``airflow synclane …`` through the real ``airflow`` executable: every command, every output format.

The commands read the declaration from ``[synclane] declaration`` (here ``AIRFLOW__SYNCLANE__DECLARATION``)
and the connection ``synclane_default``, unless ``--declaration`` and ``--conn-id`` say otherwise. The
table holds the operator tests' scene (``tests/support/operate_scene.py``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
import yaml
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from synclane_demo.local import airflow_connection
from synclane_provider.cli.commands import LANE_COLUMNS, NARROW_JOB, PROGRESS_COLUMNS
from synclane_provider.core import WorkerSlot
from synclane_provider.core.db.schema_versions import migrate, read_status, shipped_migrations
from tests.support import operate_declaration
from tests.support.airflow_env import copy_migrated_metadata
from tests.support.api_server import PROJECT, airflow, airflow_env
from tests.support.database import drop_schemas
from tests.support.helpers import failing
from tests.support.operate_scene import BROKEN, declaration, job, set_scene
from tests.support.real_airflow import connection_uri

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

FORMATS = ("table", "json", "yaml", "plain")
LISTINGS = {
    "queues": ["queues"],
    "jobs": ["jobs", "--owner", "globex"],
    "lanes": ["lanes"],
    "progress": ["progress"],
    "progress-one": ["progress", "globex"],
}


@pytest.fixture(scope="module")
def cli_schema(database_url: str):
    name = f"synclane_cli_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        drop_schemas(conn, name)


@pytest.fixture(scope="module")
def env(database_url, cli_schema, tmp_path_factory) -> dict[str, str]:
    return airflow_env(tmp_path_factory.mktemp("airflow-cli"), database_url=database_url, schema=cli_schema)


@pytest.fixture
def scene(database_url, cli_schema) -> dict[str, int]:
    return set_scene(database_url, cli_schema)


def synclane(*args: str, env: dict[str, str]) -> str:
    done = airflow("synclane", *args, env=env)
    assert done.returncode == 0, f"airflow synclane {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def listings(database_url, cli_schema, env) -> dict[tuple[str, str], str]:
    """Every listing in every format, four at a time (each call starts Airflow's CLI afresh)."""
    set_scene(database_url, cli_schema)
    calls = [(name, output) for name in LISTINGS for output in FORMATS]
    with ThreadPoolExecutor(4) as pool:
        outputs = pool.map(lambda call: synclane(*LISTINGS[call[0]], "--output", call[1], env=env), calls)
        return dict(zip(calls, outputs))


def steady(rows: list[dict]) -> list[dict]:
    """The rows without the ages, which grow between two calls."""
    return [{k: v for k, v in row.items() if not k.endswith(("age", "age_s", "lag"))} for row in rows]


@pytest.mark.parametrize("name", LISTINGS)
def test_a_listing_prints_the_same_rows_as_json_yaml_plain_and_table(listings, name):
    rows = json.loads(listings[name, "json"])
    assert rows and steady(yaml.safe_load(listings[name, "yaml"])) == steady(rows)
    header = listings[name, "plain"].splitlines()[0].split()
    # a table of jobs or owners' progress shows the columns an operator scans; every other listing the same
    # columns as json
    narrow = {"jobs": list(NARROW_JOB), "progress": list(PROGRESS_COLUMNS), "lanes": list(LANE_COLUMNS)}
    assert header == narrow.get(name, list(rows[0]))
    for row in rows:
        first = str(next(iter(row.values())))
        assert first in listings[name, "plain"] and first in listings[name, "table"]


def test_owners_progress_fits_a_terminal_of_100_columns_with_durations_as_people_write_them(listings):
    table = listings["progress", "plain"].splitlines()
    assert max(len(line.rstrip()) for line in table) <= 100, "\n".join(table)
    rows = json.loads(listings["progress", "json"])
    assert all(row["condition"] in ("paused", "failing", "degraded", "behind", "healthy") for row in rows)
    assert not any(str(row["lag"]) in listings["progress", "plain"] for row in rows if row["lag"])  # no raw seconds


def test_lanes_fit_a_terminal_of_100_columns_and_say_what_holds_a_lane(listings, env):
    table = listings["lanes", "plain"].splitlines()
    assert max(len(line.rstrip()) for line in table) <= 100, "\n".join(table)
    rows = {row.split()[0]: row for row in table[1:]}
    assert "75" in rows["globex"] and "#" in rows["globex"]  # its running job and cursor
    wide = synclane("lanes", "--wide", "-o", "plain", env=env).splitlines()[0].split()
    assert wide == list(json.loads(listings["lanes", "json"])[0])  # every field, as json has them


def test_queues_count_jobs_by_status(listings, database_url, cli_schema):
    [shops] = json.loads(listings["queues", "json"])
    assert (shops["queue"], shops["abandoned"], shops["running"], shops["failed"]) == ("shops", "1", "3", "1")


def test_lanes_show_each_running_job_its_cursor_and_worker(listings):
    rows = json.loads(listings["lanes", "json"])
    assert [row["lane"] for row in rows] == ["acme", "acme", "globex", "initech"]  # a row per running job
    acme = [row for row in rows if row["lane"] == "acme"]
    assert [(row["running_owner"], row["running_slot"], row["running_worker"]) for row in acme] == [
        ("acme-eu", "0", "worker-host-2:slot-0"),
        ("acme-eu", "1", "worker-host-2:slot-1"),
    ]
    lanes = {row["lane"]: row for row in rows}
    assert (lanes["globex"]["running_cursor"], lanes["globex"]["running_worker"]) == ("75", "worker-host-1:slot-0")
    assert (lanes["initech"]["running_id"], lanes["initech"]["last_error"]) == (
        None,
        "TimeoutError: the shop did not answer in 10s",
    )


def test_progress_shows_every_owner_and_one_owner_alone(listings):
    owners = {o["owner"]: o for o in json.loads(listings["progress", "json"])}
    assert list(owners) == ["acme-eu", "acme-us", "globex", "initech"]
    assert owners["acme-us"]["initial_complete"] == "True"
    assert (owners["globex"]["abandoned"], owners["globex"]["last_error"]) == ("1", BROKEN)
    [globex] = json.loads(listings["progress-one", "json"])
    assert (globex["owner"], globex["abandoned"], globex["running"], globex["complete"]) == (
        "globex",
        "1",
        "1",
        "False",
    )


def at_once(*calls: tuple[str, ...], env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """Commands that only read, each its own ``airflow`` process, run side by side (each start takes seconds)."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: airflow(*call, env=env), calls))


def test_jobs_filter_and_say_where_the_next_page_starts(scene, env, database_url, cli_schema):
    with psycopg.connect(database_url) as conn:
        newest = conn.execute(
            sql.SQL("SELECT max(id) FROM {}.jobs WHERE owner = 'globex'").format(sql.Identifier(cli_schema))
        ).fetchone()[0]
    by_status, done, as_json, before, table = at_once(
        ("synclane", "jobs", "--status", "abandoned", "-o", "json"),
        ("synclane", "jobs", "--owner", "globex", "--limit", "1"),
        ("synclane", "jobs", "--owner", "globex", "--limit", "1", "-o", "json"),
        ("synclane", "jobs", "--owner", "globex", "--limit", "1", "--before", str(newest), "-o", "json"),
        ("synclane", "jobs", "--status", "abandoned", "-o", "plain"),
        env=env,
    )
    [abandoned] = json.loads(by_status.stdout)
    assert (abandoned["id"], abandoned["cursor"], abandoned["error"]) == (str(scene["abandoned"]), "50", BROKEN)
    landed = {name: abandoned[f"{name}_count"] for name in ("inserted", "updated", "unchanged", "stale", "deleted")}
    assert landed == {"inserted": "40", "updated": "8", "unchanged": "0", "stale": "2", "deleted": "0"}
    assert "40 inserted, 8 updated, 2 stale" in table.stdout  # the table's landed column: the counts not zero
    assert done.returncode == 0 and f"more: --before {newest}" in done.stderr
    assert json.loads(as_json.stdout)[0]["id"] == str(newest)  # the hint stays off stdout, which is the JSON
    assert f"more: --before {newest}" in as_json.stderr
    [second] = json.loads(before.stdout)
    assert int(second["id"]) < newest


def unfinished(database_url: str, schema: str, owner: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {}.jobs WHERE owner = %s AND status NOT IN ('completed', 'abandoned')"
            ).format(sql.Identifier(schema)),
            [owner],
        ).fetchone()[0]


def database_now(database_url: str) -> datetime:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT now()").fetchone()[0]


def planned_since(database_url: str, schema: str, since: datetime) -> tuple[datetime, list[tuple[str, datetime]]]:
    """When the scene was planned, and the mode and window end of each job created after ``since``."""
    with psycopg.connect(database_url) as conn:
        jobs = sql.Identifier(schema)
        [(scene,)] = conn.execute(sql.SQL("SELECT min(created_at) FROM {}.jobs").format(jobs)).fetchall()
        query = sql.SQL("SELECT mode, window_end FROM {}.jobs WHERE created_at > %s ORDER BY id").format(jobs)
        return scene, conn.execute(query, [since]).fetchall()


def test_requeue_cancel_enqueue_and_plan_change_the_table(scene, env, database_url, cli_schema):
    assert json.loads(synclane("requeue", "--job-id", str(scene["abandoned"]), "-o", "json", env=env)) == [
        {"requeued": "1"}
    ]
    assert (
        job(database_url, cli_schema, scene["abandoned"])["status"],
        job(database_url, cli_schema, scene["abandoned"])["cursor"],
    ) == ("pending", "50")

    # all of initech's jobs are waiting (a recurring window more after the first 15 minutes of a UTC day)
    waiting = unfinished(database_url, cli_schema, "initech")
    assert waiting in (3, 4)
    assert json.loads(synclane("cancel", "initech", "--reason", "account disconnected", "-o", "json", env=env)) == [
        {"abandoned": str(waiting), "stopping": "0"}
    ]
    cancelled = job(database_url, cli_schema, scene["failed"])
    assert (cancelled["status"], cancelled["error"]) == ("abandoned", "Cancelled: account disconnected")

    [enqueued] = json.loads(
        synclane("enqueue", "globex", "products", "--key", "after-ticket-42", "-o", "json", env=env)
    )
    assert (enqueued["enqueued"], enqueued["mode"], enqueued["dedup_key"]) == ("1", "manual", "manual:after-ticket-42")

    before = database_now(database_url)
    [planned] = json.loads(synclane("plan", "--owner", "globex", "-o", "json", env=env))
    # planned already: new is only a window that opened since the scene's plan (a quarter hour or a day begun since)
    scene_planned, created = planned_since(database_url, cli_schema, before)
    assert (planned["queue"], planned["owners"], planned["inserted"]) == ("shops", "1", str(len(created)))
    assert all(mode == "recurring" and (end is None or end > scene_planned) for mode, end in created), created
    assert "requeued" in synclane("requeue", "--owner", "globex", "-o", "table", env=env)


def test_schema_reports_applies_and_prints_the_migrations(scene, env):
    status = synclane("schema", "status", env=env)
    assert "as this SyncLane needs" in status and "0008_freshness_index" in status
    assert "applied" not in synclane("schema", "apply", env=env).replace("already", "")
    assert synclane("schema", "sql", env=env).strip().startswith("--")


def test_the_help_names_the_configuration_options_the_defaults_come_from(env):
    """Airflow's help formatter reads ``[...]`` as markup: the section names must survive it."""
    help_text = " ".join(synclane("plan", "--help", env=env).split())
    assert "(default: [synclane] conn_id, else synclane_default)" in help_text
    assert "(default: [synclane] declaration, else $SYNCLANE_DECLARATION)" in help_text


def test_the_declaration_and_connection_can_be_named_on_the_command_line(scene, env, database_url):
    unconfigured = {k: v for k, v in env.items() if k != "AIRFLOW__SYNCLANE__DECLARATION"}
    other = {**unconfigured, "AIRFLOW_CONN_REPORTING_DB": airflow_connection(database_url)}
    named = ("--declaration", "tests.support.operate_declaration:synclane", "--conn-id", "reporting_db", "-o", "json")
    with ThreadPoolExecutor(4) as pool:
        nowhere, not_configured, elsewhere, done = pool.map(
            lambda call: airflow("synclane", "queues", *call[0], env=call[1]),
            [
                (("--declaration", "nowhere.at_all:synclane"), env),
                ((), unconfigured),
                (named, other),
                (("--conn-id", "no_such_connection"), env),
            ],
        )
    assert nowhere.returncode != 0 and "cannot import module 'nowhere.at_all'" in nowhere.stderr
    assert not_configured.returncode != 0 and "[synclane] declaration" in not_configured.stderr
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert json.loads(elsewhere.stdout)[0]["abandoned"] == "1"
    assert done.returncode != 0 and done.stderr.strip().splitlines()[-1] == (
        "synclane: The conn_id `no_such_connection` isn't defined in the environment, the metadata database or a "
        "secrets backend (--conn-id)"
    )
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def user_env(database_url, cli_schema, tmp_path_factory, airflow_db) -> dict[str, str]:
    """Set up as the tutorial says: the declaration only in the DAG folder (not on PYTHONPATH), the connection added
    with ``airflow connections add`` into the metadata database (no ``AIRFLOW_CONN_`` variable). The metadata
    database is a copy of the session's migrated one (``airflow db migrate`` is the user path test's)."""
    home = tmp_path_factory.mktemp("airflow-user")
    env = airflow_env(home, database_url=database_url, schema=cli_schema)
    del env["AIRFLOW_CONN_SYNCLANE_DEFAULT"], env["PYTHONPATH"]
    env["AIRFLOW__SYNCLANE__DECLARATION"] = "shop_sync:synclane"
    (home / "dags" / "shop_sync.py").write_text(Path(operate_declaration.__file__).read_text(), encoding="utf-8")
    copy_migrated_metadata(home / "airflow.db")
    command = ("connections", "add", "synclane_default", "--conn-uri", connection_uri(database_url))
    done = airflow(*command, env=env, timeout=300)
    assert done.returncode == 0, f"airflow {' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return env


def test_a_declaration_in_the_dag_folder_and_a_connection_in_the_metadata_database_are_found(scene, user_env):
    [shops] = json.loads(synclane("queues", "-o", "json", env=user_env))
    assert (shops["queue"], shops["abandoned"], shops["running"]) == ("shops", "1", "3")
    assert "0008_freshness_index" in synclane("schema", "status", env=user_env)


def test_an_owner_whose_credentials_need_reconnecting_is_shown_so_by_owners_and_progress(scene, env):
    reason = "needs reconnecting: the token endpoint answered invalid_grant"
    synclane("pause", "globex", "--reason", reason, "--by", "credentials", env=env)
    [owners_row] = [line for line in synclane("owners", "-o", "plain", env=env).splitlines() if "globex" in line]
    [progress_row] = [line for line in synclane("progress", "-o", "plain", env=env).splitlines() if "globex" in line]
    synclane("resume", "globex", env=env)
    assert owners_row.split()[1:3] == ["needs", "reconnecting"] and "by credentials" in owners_row
    assert progress_row.split()[1:3] == ["needs", "reconnecting"]


def test_a_declaration_found_nowhere_is_an_error_naming_every_place_searched(user_env):
    done = airflow("synclane", "queues", "--declaration", "nowhere_sync:synclane", env=user_env)
    home = Path(user_env["AIRFLOW_HOME"])
    assert done.returncode != 0
    assert "cannot import module 'nowhere_sync' of declaration='nowhere_sync:synclane'" in done.stderr
    assert f"{home / 'dags'} (the DAG folder)" in done.stderr and "site-packages (the Python path)" in done.stderr


def test_pause_owners_and_resume_an_owner(scene, env, database_url, cli_schema):
    [paused] = json.loads(
        synclane("pause", "globex", "--reason", "token revoked", "--by", "ana", "-o", "json", env=env)
    )
    assert (paused["owner"], paused["paused_reason"], paused["paused_by"]) == ("globex", "token revoked", "ana")
    assert paused["paused_at"]
    long_reason = "401 Unauthorized from the shop: the account's API token was revoked by its administrator"
    synclane("pause", "initech", "--reason", long_reason, "--by", "ana", env=env)
    table = synclane("owners", "-o", "plain", env=env).splitlines()
    assert table[0].split() == ["owner", "state", "failures", "paused", "reason"]
    [globex] = [line for line in table if line.startswith("globex")]
    assert "paused" in globex and "healthy" not in globex  # never healthy beside a pause
    assert max(len(line.rstrip()) for line in table) <= 100, "\n".join(table)
    synclane("resume", "initech", env=env)
    [listed] = json.loads(synclane("owners", "--troubled", "-o", "json", env=env))
    assert (listed["owner"], listed["condition"], listed["paused_reason"]) == ("globex", "paused", "token revoked")
    [resumed] = json.loads(synclane("resume", "globex", "-o", "json", env=env))
    assert (resumed["owner"], resumed["paused_at"], resumed["paused_by"]) == ("globex", None, None)
    assert resumed["condition"] == "degraded"  # its abandoned job waits for a person: it never reads healthy
    assert "owner" in synclane("owners", "-o", "table", env=env)
    [still] = json.loads(synclane("owners", "--troubled", "-o", "json", env=env))
    assert (still["owner"], still["condition"], still["abandoned"]) == ("globex", "degraded", "1")


def test_resume_refuses_an_owner_nobody_lists_in_one_line(scene, env):
    refused = airflow("synclane", "resume", "umbrela", env=env)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "synclane: owner 'umbrela' is not listed by the owner source of queue 'shops', and is not paused: there is "
        "nothing to resume"
    )


@pytest.mark.parametrize(
    "command",
    [
        ("progress", "umbrela"),
        ("jobs", "--owner", "umbrela"),
        ("requeue", "--owner", "umbrela"),
        ("credentials", "show", "umbrela"),
    ],
)
def test_a_mistyped_owner_is_refused_in_one_line_naming_it_rather_than_answered_with_nothing(scene, env, command):
    refused = airflow("synclane", *command, env=env)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("synclane: owner 'umbrela' is not listed by the owner source of queue 'shops'"), line


def test_a_command_whose_owner_source_fails_changes_nothing_and_says_why_in_one_line(scene, env, database_url):
    synclane("pause", "initech", "--reason", "token revoked", env=env)
    down = {**env, "SYNCLANE_OPERATE_ACCOUNTS_DOWN": "1"}
    refused = airflow("synclane", "resume", "initech", env=down)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "synclane: resume failed: RuntimeError: no database for the accounts: set ACCOUNTS_URL (-v shows the traceback)"
    )
    [initech] = [o for o in json.loads(synclane("owners", "-o", "json", env=env)) if o["owner"] == "initech"]
    assert initech["paused_at"] is not None  # nothing changed: still paused
    assert "Traceback" in airflow("synclane", "resume", "initech", "-v", env=down).stderr


def test_resync_makes_one_request_and_resyncs_lists_cancels_and_requeues_it(scene, env, database_url, cli_schema):
    args = ("--type", "orders", "--from", "2026-03-01", "--to", "2026-03-03", "--owner", "globex", "--owner", "acme-us")
    [made] = json.loads(synclane("resync", *args, "--reason", "March totals", "--key", "march", "-o", "json", env=env))
    assert made == {"key": "march", "made": "2", "jobs": "2"}  # one 30-day slice holds the range, for each owner
    [again] = json.loads(synclane("resync", *args, "--reason", "March totals", "--key", "march", "-o", "json", env=env))
    assert again["made"] == "0"

    [listed] = json.loads(synclane("resyncs", "--key", "march", "-o", "json", env=env))
    assert (listed["done"], listed["owners"], listed["reason"], listed["from"]) == (
        "0/2",
        "globex,acme-us",
        "March totals",
        "2026-03-01T00:00:00+00:00",
    )
    assert listed["by"]  # the login name of whoever ran it
    [cancelled] = json.loads(synclane("resyncs", "--cancel", "march", "--by", "ops", "-o", "json", env=env))
    assert (cancelled["abandoned"], cancelled["stopping"]) == ("2", "0")
    [requeued] = json.loads(synclane("resyncs", "--requeue", "march", "--force-deletions", "-o", "json", env=env))
    assert requeued["requeued"] == "0"  # a cancelled request stays cancelled, even forced

    refused = airflow("synclane", "resync", *args[:6], "--owner", "nobody", "--reason", "r", env=env)
    assert refused.returncode != 0 and "'nobody' is not listed" in refused.stderr


def test_resync_dry_run_prints_the_windows_cut_on_the_owners_history_and_makes_nothing(
    scene, env, database_url, cli_schema
):
    """The scene's owners were first planned today: their 30-day slices end today and 30 days ago. 45 days back
    to today are the newest slice and half of the one before, for both owners (one row each window)."""
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    days = ("--from", f"{today - timedelta(days=45):%Y-%m-%d}", "--to", f"{today:%Y-%m-%d}")
    args = ("--type", "orders", *days, "--owner", "globex", "--owner", "acme-us", "--reason", "r")
    printed = json.loads(synclane("resync", *args, "--dry-run", "-o", "json", env=env))
    boundary = today - timedelta(days=30)
    assert printed == [
        {"owners": "globex,acme-us", "window_start": boundary.isoformat(), "window_end": today.isoformat()},
        {
            "owners": "globex,acme-us",
            "window_start": (today - timedelta(days=45)).isoformat(),
            "window_end": boundary.isoformat(),
        },
    ]
    with psycopg.connect(database_url) as conn:
        count = sql.SQL(
            "SELECT (SELECT count(*) FROM {0}.resync_requests), (SELECT count(*) FROM {0}.jobs"
            " WHERE request_key IS NOT NULL)"
        ).format(sql.Identifier(cli_schema))
        assert conn.execute(count).fetchone() == (0, 0)
    [made] = json.loads(synclane("resync", *args, "--key", "k", "-o", "json", env=env))
    assert made == {"key": "k", "made": "4", "jobs": "4"}
    again = synclane("resync", *args, "--key", "k", "--dry-run", env=env)
    assert again.strip() == "re-sync k was asked for already (4 jobs): nothing would be made"


def test_a_secret_in_a_handlers_error_is_in_no_listing(scene, env, database_url, cli_schema):
    """A worker stores the error of a handler that quotes its API key; every listing shows ``***`` in its place."""
    leaky = failing(RuntimeError("401 Unauthorized for https://api.example.com/v1/orders?api_key=sk_live_cli_5150"))
    declared = declaration(cli_schema)
    [queue] = declared.queues
    queue = dataclasses.replace(queue, types=[dataclasses.replace(t, handler=leaky) for t in queue.types])
    declared = dataclasses.replace(declared, queues=[queue])
    with WorkerSlot(declared, declared.database(database_url), "shops") as slot:
        assert slot.run_one() is not None
    outputs = [
        synclane(*listing, "--output", output, env=env)
        for listing in (["jobs"], ["lanes"], ["progress", "--wide"])
        for output in ("json", "table")
    ]
    assert all("sk_live_cli_5150" not in output for output in outputs)
    assert "api_key=***" in outputs[0]


def credentials(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``airflow synclane credentials …`` with ``stdin`` as its input (the way a value is handed over)."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "synclane", "credentials", *args],
        env=env,  # with the credentials key of tests.support.api_server.airflow_env
        cwd=PROJECT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )


def stored_credentials(database_url: str, schema: str) -> str:
    with psycopg.connect(database_url) as conn:
        query = sql.SQL("SELECT coalesce(string_agg(c::text, E'\\n'), '') FROM {}.credentials AS c")
        return conn.execute(query.format(sql.Identifier(schema))).fetchone()[0]


def test_credentials_set_reads_them_from_stdin_or_a_file_and_only_their_state_is_shown(
    scene, env, database_url, cli_schema, tmp_path
):
    oauth = '{"access_token": "at_cli_clear_6161", "refresh_token": "rt_cli_clear_6262", "expires_in": 3600}'
    done = credentials("set", "globex", "-o", "json", env=env, stdin=oauth)
    assert done.returncode == 0, done.stderr
    [state] = json.loads(done.stdout)
    assert (state["owner"], state["kind"]) == ("globex", "oauth") and state["state"].startswith(
        "set (oauth), expires in"
    )
    key_file = tmp_path / "initech.key"
    key_file.write_text("sk_live_cli_clear_6363\n")
    done = credentials("set", "initech", "--file", str(key_file), "-o", "json", env=env)
    assert done.returncode == 0, done.stderr

    shown = credentials("show", "-o", "json", env=env)
    states = {row["owner"]: row["state"][:12] for row in json.loads(shown.stdout)}
    assert (states.pop("globex"), states.pop("initech")) == ("set (oauth),", "set (api_key")
    assert "acme-eu" in states and set(states.values()) == {"not set"}  # every other listed owner
    everything = done.stdout + done.stderr + shown.stdout + shown.stderr + stored_credentials(database_url, cli_schema)
    for value in ("at_cli_clear_6161", "rt_cli_clear_6262", "sk_live_cli_clear_6363"):
        assert value not in everything


def test_credentials_set_without_a_key_or_for_an_unknown_owner_is_refused_by_name(scene, env, database_url, cli_schema):
    no_key = {**env, "AIRFLOW__SYNCLANE__CREDENTIALS_KEY": "", "AIRFLOW__CORE__FERNET_KEY": ""}
    done = credentials("set", "globex", env=no_key, stdin="sk_live_never_stored_6464")
    assert done.returncode != 0
    assert "no key to encrypt owners' credentials: set [synclane] credentials_key" in done.stderr
    done = credentials("set", "umbrela", env=env, stdin="sk_live_never_stored_6464")
    assert done.returncode != 0 and "'umbrela'" in done.stderr
    assert "sk_live_never_stored_6464" not in done.stderr + stored_credentials(database_url, cli_schema)


# --- the wrong connection, a schema missing or behind, an unreachable database ----------------------------------

SCRATCH = f"cliconn_scratch_{uuid.uuid4().hex[:8]}"
"""A database of its own, made and dropped by the test, that no command may put a schema into."""

ON_JOBS = (
    ("progress",),
    ("owners",),
    ("lanes",),
    ("jobs",),
    ("queues",),
    ("requeue", "--owner", "globex"),
    ("cancel", "globex", "--reason", "r"),
    ("pause", "globex", "--reason", "r"),
    ("resume", "globex"),
    ("credentials", "show"),
    ("resync", "--type", "orders", "--from", "2026-03-01", "--to", "2026-03-03", "--reason", "r"),
    ("plan",),
    ("enqueue", "globex", "products"),
)
"""Commands that read or change jobs: none of them creates or upgrades the schema."""


@pytest.fixture
def scratch(database_url: str) -> Iterator[str]:
    """The conninfo of an empty database, dropped afterwards."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(SCRATCH)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(SCRATCH)))
    try:
        yield make_conninfo(database_url, dbname=SCRATCH)
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(SCRATCH)))


def schemas_in(conninfo: str) -> list[str]:
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' ORDER BY 1").fetchall()
        return [name for (name,) in rows if name not in ("public", "information_schema")]


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_a_connection_that_is_not_postgresql_is_refused_by_name_and_nothing_is_created(env, scratch):
    """An ``http`` connection would still reach a PostgreSQL server through libpq's defaults (here: the scratch
    database) and used to get the whole schema made there."""
    parts = conninfo_to_dict(scratch)
    http = json.dumps({"conn_type": "http", "host": "127.0.0.1", "login": parts.get("user"), "schema": SCRATCH})
    wrong = {**env, "AIRFLOW_CONN_HTTP": http}
    done = at_once(
        ("synclane", "progress", "--conn-id", "http"),
        ("synclane", "schema", "apply", "--conn-id", "http"),
        env=wrong,
    )
    for command in done:
        assert last_line(command) == (
            "synclane: connection 'http' is of type 'http': the jobs table needs a connection of type synclane or "
            "postgres (--conn-id, [synclane] conn_id)"
        )
    assert schemas_in(scratch) == []


def test_a_command_on_jobs_never_creates_a_missing_schema_and_says_how_to_make_it(env, scratch, cli_schema):
    where = {**env, "AIRFLOW_CONN_SCRATCH": airflow_connection(scratch)}
    parts = conninfo_to_dict(scratch)
    database = f'"{SCRATCH}" on {parts.get("host") or "localhost"}:{parts.get("port") or 5432}'
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda call: airflow("synclane", *call, "--conn-id", "scratch", env=where), ON_JOBS))
    for call, command in zip(ON_JOBS, done, strict=True):
        assert last_line(command) == (
            f'synclane: schema "{cli_schema}" in database {database} has no jobs table; `airflow synclane {call[0]}` '
            f"changes no schema: `airflow synclane schema apply --conn-id scratch` creates it (so does the planner "
            f"DAG's next run)"
        ), call
    assert schemas_in(scratch) == []


def test_a_command_on_jobs_never_upgrades_a_schema_behind_and_schema_apply_does(env, scratch, cli_schema):
    where = {**env, "AIRFLOW_CONN_SCRATCH": airflow_connection(scratch)}
    shipped = shipped_migrations()
    with psycopg.connect(scratch, autocommit=True) as conn:
        migrate(conn, cli_schema, shipped[:-1])
    owners = airflow("synclane", "owners", "--conn-id", "scratch", env=where)
    assert f"is at version {shipped[-2].version}, this SyncLane needs {shipped[-1].version};" in last_line(owners)
    assert "`airflow synclane schema apply --conn-id scratch` upgrades it" in last_line(owners)
    with psycopg.connect(scratch, autocommit=True) as conn:
        assert read_status(conn, cli_schema).pending == (shipped[-1],)  # unchanged
    assert f"applied {shipped[-1].label}" in synclane("schema", "apply", "--conn-id", "scratch", env=where)
    assert json.loads(synclane("owners", "--conn-id", "scratch", "-o", "json", env=where) or "[]") == []


def test_an_unreachable_database_fails_a_command_in_seconds_in_one_line_and_a_refusal_at_once(env, database_url):
    """A worker waits minutes for its database (tests/faults); a person at a command line is told in seconds.
    A database that does not exist or a role the server does not know is reported without waiting."""
    parts = conninfo_to_dict(database_url)
    host, port = parts.get("host") or "localhost", int(parts.get("port") or 5432)
    secret = "pw_cliconn_never_shown_5999"

    def connection(**fields: object) -> str:
        given = {"conn_type": "postgres", "host": host, "port": port, "login": "postgres", "schema": "synclane"}
        return json.dumps({**given, "password": secret, **fields})

    where = {
        **env,
        "AIRFLOW_CONN_BADPG": connection(host="127.0.0.1", port=5999),
        "AIRFLOW_CONN_NODB": connection(schema="cliconn_no_such_database"),
        "AIRFLOW_CONN_NOROLE": connection(login="cliconn_no_such_role"),
    }

    def timed(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
        started = time.monotonic()
        done = airflow("synclane", "owners", *args, env=where)
        return time.monotonic() - started, done

    with ThreadPoolExecutor(3) as pool:
        # -v shows each retry's warning: a refused connection has none
        calls = [("--conn-id", "badpg"), ("--conn-id", "nodb", "-v"), ("--conn-id", "norole")]
        (slow, unreachable), (_, no_db), (_, no_role) = pool.map(lambda call: timed(*call), calls)
    assert slow < 30, slow
    assert unreachable.returncode != 0 and unreachable.stderr.strip().splitlines() == [
        "synclane: database unreachable for 5 s: database 'synclane' on 127.0.0.1:5999 as 'postgres': Connection "
        "refused (connection 'badpg')"
    ], unreachable.stderr
    assert no_db.stderr.strip().splitlines() == [
        f"synclane: the database refused the connection: database 'cliconn_no_such_database' on {host}:{port} as "
        f"'postgres': database \"cliconn_no_such_database\" does not exist (connection 'nodb')"
    ], no_db.stderr
    assert no_role.returncode != 0 and last_line(no_role).startswith("synclane: the database refused the connection")
    assert "role \"cliconn_no_such_role\" does not exist (connection 'norole')" in last_line(no_role)
    assert all(secret not in done.stdout + done.stderr for done in (unreachable, no_db, no_role))
