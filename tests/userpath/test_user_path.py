"""A new user's path, from the tutorial "Your first sync in your own Airflow" (docs/tutorials/first-sync.md)
alone: the provider installed from a wheel into a fresh virtualenv, a fresh ``AIRFLOW_HOME`` with its metadata in
PostgreSQL and the jobs table in another database, the tutorial's declaration only in the DAG folder, the
connection added with ``airflow connections add``, the example DAGs copied in and configured in ``airflow.cfg``,
unpaused as the tutorial says, ``airflow standalone``.

Each step is the tutorial's own command, in the tutorial's order (a test checks the order against its text).
The wheel is built once from the checkout and installed, not editable, with ``uv pip install`` (pip's
interface, the project's constraints, its cache). Once the sync has settled:

* the SyncLane page's JSON (a token from ``/auth/token``) and ``airflow synclane progress|jobs|lanes`` say what
  the table says;
* the page renders in Chromium (``test-artifacts/userpath/page.png``);
* no try of a ``synclane_work`` slot failed (Airflow's REST API);
* stopping ``airflow standalone`` (SIGTERM to its process group) leaves no process of it alive.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from synclane_demo.local import sqlalchemy_url, wait_for_airflow
from synclane_demo.processes import Service
from tests.support.browser import chromium
from tests.support.first_sync import tutorial_declaration, tutorial_steps
from tests.support.real_airflow import AirflowApi, clean_environment, connection_uri, free_port, wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

PROJECT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SYNCLANE_TEST_ARTIFACTS", PROJECT / "test-artifacts")) / "userpath"
DAGS = ("synclane_plan.py", "synclane_work.py", "synclane_health.py", "synclane_requeue.py")
UNPAUSE = ("dags", "unpause", "--treat-dag-id-as-regex", "--yes", "^synclane_")

# What the test does, as the tutorial says it, in the tutorial's order.
TUTORIAL_STEPS = (
    "pip wheel --no-deps -w dist /path/to/synclane\n"
    "pip install -c /path/to/synclane/constraints.txt dist/airflow_provider_synclane-*.whl",
    "airflow db migrate",
    "airflow connections add synclane_default --conn-uri",
    "`dags/shop_sync.py`",
    "mkdir -p $AIRFLOW_HOME/dags",
    "copy [`dags/synclane_plan.py`]",
    "declaration = shop_sync:synclane\nqueue = shops",
    "AIRFLOW__API__PORT=18080",
    "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT",
    "airflow dags reserialize",
    "airflow standalone",
    "Airflow is ready",
    "airflow " + " ".join(UNPAUSE[:-1]) + " '^synclane_'",
    "from synclane.jobs",
    "airflow synclane progress",
    "SyncLane** in the navigation",
)


@dataclass
class Trial:
    env: dict[str, str]
    home: Path
    jobs_url: str
    api: AirflowApi | None = None
    airflow: Service | None = None
    log: list[str] = field(default_factory=list)
    left_after_stop: list[int] | None = None

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """One command of the fresh environment (its ``airflow``, found through its PATH), run to its end."""
        self.log.append(" ".join(args))
        done = subprocess.run(list(args), env=self.env, cwd=self.home, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def rows(self) -> list[dict]:
        with psycopg.connect(self.jobs_url, row_factory=dict_row) as conn:
            try:
                return conn.execute("SELECT * FROM synclane.jobs ORDER BY id").fetchall()
            except psycopg.errors.UndefinedTable:
                return []

    def synclane(self, *args: str) -> list[dict]:
        return json.loads(self.run("airflow", "synclane", *args, "--output", "json").stdout)


def fresh_environment(base: Path) -> Path:
    """A virtualenv with only the provider's wheel (built from the checkout) and what it depends on."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv is needed to build and install the wheel (scripts/test installs it into .venv)"
    dist, venv = base / "dist", base / "venv"
    built = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(dist), str(PROJECT)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    [wheel] = dist.glob("airflow_provider_synclane-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    installed = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            "-c",
            str(PROJECT / "constraints.txt"),
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    return venv


def configure(cfg: Path) -> None:
    """Set the two options of the ``[synclane]`` section Airflow wrote into ``airflow.cfg``, as the tutorial says."""
    text = cfg.read_text(encoding="utf-8")
    for option, value in (("declaration", "shop_sync:synclane"), ("queue", "shops")):
        assert f"\n# {option} = \n" in text, f"airflow.cfg has no commented-out [synclane] {option}"
        text = text.replace(f"\n# {option} = \n", f"\n{option} = {value}\n", 1)
    cfg.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def trial(database_url: str, tmp_path_factory) -> Trial:
    base = tmp_path_factory.mktemp("userpath")
    suffix = uuid.uuid4().hex[:8]
    metadata_db, jobs_db = f"synclane_userpath_meta_{suffix}", f"synclane_userpath_jobs_{suffix}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name in (metadata_db, jobs_db):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    jobs_url = psycopg.conninfo.make_conninfo(database_url, dbname=jobs_db)
    home = base / "airflow"
    (home / "dags").mkdir(parents=True)
    port = free_port()
    try:
        venv = fresh_environment(base)
        env = clean_environment()
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "PATH": os.pathsep.join([str(venv / "bin"), env.get("PATH", os.defpath)]),
                "VIRTUAL_ENV": str(venv),
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlalchemy_url(
                    psycopg.conninfo.make_conninfo(database_url, dbname=metadata_db)
                ),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                # Another port than 8080, as the tutorial says to set it, and log servers of its own.
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__BASE_URL": f"http://localhost:{port}",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                # A small machine: few executor processes, one API worker.
                "AIRFLOW__CORE__PARALLELISM": "6",
                "AIRFLOW__API__WORKERS": "1",
            }
        )
        run = Trial(env, home, jobs_url)
        run.run("airflow", "db", "migrate")
        run.run("airflow", "connections", "add", "synclane_default", "--conn-uri", connection_uri(jobs_url))
        (home / "dags" / "shop_sync.py").write_text(tutorial_declaration(), encoding="utf-8")
        for name in DAGS:
            shutil.copy(PROJECT / "dags" / name, home / "dags" / name)
        configure(home / "airflow.cfg")
        run.run("airflow", "dags", "reserialize")
        run.airflow = Service(
            "airflow",
            [str(venv / "bin" / "airflow"), "standalone"],
            env=env,
            log_path=base / "standalone.log",
            cwd=home,
        ).start()
        wait_for_airflow(run.airflow, port, timeout=300)
        wait_until(
            lambda: "Airflow is ready" in run.airflow.log_path.read_text(errors="replace"),
            120,
            "Airflow is ready",
            explain=run.airflow.tail,
        )
        run.run("airflow", *UNPAUSE)
        run.api = AirflowApi(f"http://127.0.0.1:{port}", home)
        wait_until(
            lambda: settled(run.rows()),
            300,
            "every planned job completed",
            every=2,
            explain=lambda: run.airflow.tail(60),
        )
        yield run
    finally:
        if "run" in locals() and run.airflow is not None and run.left_after_stop is None:
            stop(run)
        with psycopg.connect(database_url, autocommit=True) as conn:
            for name in (metadata_db, jobs_db):
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def settled(rows: list[dict]) -> bool:
    """The first plan's jobs (every owner's snapshot and history slices) all completed, nothing else waiting."""
    kinds = {(r["owner"], r["type"]) for r in rows}
    return len(kinds) == 6 and all(r["status"] == "completed" for r in rows)


def stop(run: Trial) -> None:
    """SIGTERM to the process group of ``airflow standalone``; what is left after 60 s is written down, then
    killed."""
    service = run.airflow
    if service.members():
        service._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and service.members():
            time.sleep(0.5)
    run.left_after_stop = service.members()
    service.stop(graceful=0)


# -- the promises ------------------------------------------------------------------------------------------


def test_every_step_taken_is_in_the_tutorial_in_that_order():
    section, at = tutorial_steps(), 0
    for step in TUTORIAL_STEPS:
        found = section.find(step, at)
        assert found >= 0, (
            f"the tutorial 'Your first sync in your own Airflow' does not say {step!r} after {section[:at][-80:]!r}"
        )
        at = found + len(step)


def agreeing(read, table):
    """``read()`` and ``table()`` when they agree, read again once if the planner added a job in between."""
    for _ in range(2):
        before, seen, after = table(), read(), table()
        if before == after:
            return seen, after
    return seen, after


def test_the_page_answers_with_a_token_from_auth_token_and_says_what_the_table_says(trial):
    def by_status() -> dict[str, int]:
        counts = dict.fromkeys(("pending", "running", "completed", "failed", "deferred", "abandoned"), 0)
        for row in trial.rows():
            counts[row["status"]] += 1
        return counts

    [queue], counts = agreeing(lambda: trial.api.get("/synclane/api/queues"), by_status)
    assert (queue["queue"], queue["jobs"], queue["types"]) == ("shops", counts, ["products", "orders"])
    owners, initial = agreeing(
        lambda: {
            o["owner"]: (o["initial_total"], o["initial_completed"])
            for o in trial.api.get("/synclane/api/queues/shops/owners")["items"]
        },
        lambda: initial_by_owner(trial.rows()),
    )
    assert owners == initial and set(owners) == {"acme-us", "acme-eu", "globex"}


def initial_by_owner(rows: list[dict]) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row["mode"] == "initial":
            total, done = found.get(row["owner"], (0, 0))
            found[row["owner"]] = (total + 1, done + (row["status"] == "completed"))
    return found


def test_airflow_synclane_progress_and_jobs_say_what_the_table_says(trial):
    progress, initial = agreeing(lambda: trial.synclane("progress"), lambda: initial_by_owner(trial.rows()))
    assert {o["owner"]: (int(o["initial_total"]), int(o["initial_completed"])) for o in progress} == initial
    jobs, rows = agreeing(lambda: trial.synclane("jobs", "--limit", "500"), trial.rows)
    assert [(int(j["id"]), j["status"], j["owner"], j["type"]) for j in jobs] == [
        (r["id"], r["status"], r["owner"], r["type"]) for r in reversed(rows)
    ]


def test_the_page_renders_in_chromium(trial):
    from playwright.sync_api import expect, sync_playwright

    executable = chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    password = json.loads((trial.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
    completed_before = sum(r["status"] == "completed" for r in trial.rows())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            page.set_default_timeout(60_000)
            expect.set_options(timeout=30_000)
            page.goto(trial.api.base + "/")
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(password)
            page.locator("button[type=submit]").click()
            page.get_by_role("link", name="SyncLane").click()
            frame = page.frame_locator("iframe")
            card = frame.locator(".card[data-queue=shops]")
            expect(card).to_contain_text(re.compile(r"\d+\s*completed"))
            shown = int(re.search(r"(\d+)\s*completed", card.inner_text()).group(1))
            completed_after = sum(r["status"] == "completed" for r in trial.rows())
            # The planner adds a job a minute, which completes: the page shows the table as it was when it loaded.
            assert completed_before <= shown <= completed_after, (completed_before, shown, completed_after)
            page.screenshot(path=str(ARTIFACTS / "page.png"), full_page=True)
            frame.get_by_role("button", name="Owners", exact=True).click()
            expect(frame.locator("#owners-table tr[data-owner=globex]")).to_contain_text("✓")
            page.screenshot(path=str(ARTIFACTS / "owners.png"), full_page=True)
        finally:
            browser.close()


def test_a_waiting_job_shows_in_airflow_synclane_lanes_as_in_the_table(trial):
    due = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(microsecond=0)
    [enqueued] = trial.synclane("enqueue", "globex", "products", "--key", "later", "--run-at", due.isoformat())
    assert enqueued["enqueued"] == "1"
    [lane] = trial.synclane("lanes")
    [row] = [r for r in trial.rows() if r["status"] == "pending"]
    assert (lane["lane"], lane["waiting"], lane["running_id"]) == (row["lane"], "1", None)
    assert datetime.fromisoformat(lane["next_due"]) == row["next_run_at"] == due


def test_no_try_of_a_worker_slot_failed(trial):
    tries = trial.api.tries("synclane_work", "work")
    assert tries, "the worker DAG ran no slot"
    failed = [(t["map_index"], t["try_number"], t["state"]) for t in tries if t["state"] in ("failed", "up_for_retry")]
    assert failed == [], f"failed slot tries: {failed}"


def test_stopping_airflow_standalone_by_its_process_group_leaves_no_process_alive(trial):
    stop(trial)
    assert trial.left_after_stop == []
