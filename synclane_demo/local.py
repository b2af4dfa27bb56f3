"""The demo on this machine: the shop, Airflow in standalone mode, and a PostgreSQL for both.

``scripts/demo`` finds a PostgreSQL (the one in ``SYNCLANE_DATABASE_URL``, else
the local server, else an embedded one kept in ``.pgdata/demo``) and runs
``python -m synclane_demo.local``, which

1. creates the databases it needs on that server when they are missing:
   ``synclane`` for SyncLane's table and the demo's own, ``synclane_airflow`` for
   Airflow's metadata (a URL that names another database than ``postgres`` is used as it is);
2. creates the demo's tables and connects its five accounts;
3. starts the shop, connects each account there (an OAuth grant) and sets its tokens as the owner's
   credentials, encrypted with the demo's key (``AIRFLOW__SYNCLANE__CREDENTIALS_KEY``, else one made once in
   ``.demo/credentials.key``);
4. starts ``airflow standalone``, with the app's OAuth client at the shop as the Airflow connection
   ``synclane_demo_shop_oauth``; each in a process group of its own, with ``AIRFLOW_HOME`` in ``.demo/airflow``
   and everything else from the environment;
5. prints where the UI is and how to log in, and stops everything it started on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import psycopg
from cryptography.fernet import Fernet
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from synclane_demo.connect import OAUTH_CONN_ID, oauth_connection, set_initial_credentials
from synclane_demo.processes import Service, wait_for_http
from synclane_demo.store import Store

PROJECT = Path(__file__).resolve().parent.parent
DATA_DATABASE = "synclane"
AIRFLOW_DATABASE = "synclane_airflow"


def with_database(url: str, dbname: str) -> str:
    return make_conninfo(url, dbname=dbname)


def ensure_database(server_url: str, dbname: str) -> None:
    """Create ``dbname`` on the server of ``server_url`` unless it exists."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))


def sqlalchemy_url(conninfo: str) -> str:
    """The same database as an SQLAlchemy URL for Airflow's metadata (psycopg 3 driver; sockets as a query)."""
    from urllib.parse import quote

    parts = conninfo_to_dict(conninfo)
    user = quote(parts.get("user") or "postgres", safe="")
    password = f":{quote(parts['password'], safe='')}" if parts.get("password") else ""
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    dbname = quote(parts["dbname"], safe="")
    if host.startswith("/"):
        return f"postgresql+psycopg://{user}{password}@/{dbname}?host={quote(host, safe='/')}&port={port}"
    return f"postgresql+psycopg://{user}{password}@{host}:{port}/{dbname}"


def airflow_connection(conninfo: str) -> str:
    """An Airflow connection (JSON, for ``AIRFLOW_CONN_SYNCLANE_DEFAULT``) to the database of ``conninfo``."""
    parts = conninfo_to_dict(conninfo)
    connection = {
        "conn_type": "postgres",
        "host": parts.get("host") or "localhost",
        "port": int(parts.get("port") or 5432),
        "login": parts.get("user") or "postgres",
        "password": parts.get("password") or "",
        "schema": parts["dbname"],
    }
    return json.dumps(connection)


LOG_SERVER_OFFSET = 713
"""Airflow's log servers listen on the UI's port plus 713 and 714: 8793 and 8794 (Airflow's own defaults) for
the UI on 8080, so that a second demo on another ``DEMO_PORT`` does not collide with the first."""


def log_server_ports(port: int) -> tuple[int, int]:
    """The worker's and the triggerer's log-server ports of a demo whose UI is on ``port``.

    >>> log_server_ports(8080), log_server_ports(9080)
    ((8793, 8794), (9793, 9794))
    """
    return port + LOG_SERVER_OFFSET, port + LOG_SERVER_OFFSET + 1


def airflow_environment(
    base: Mapping[str, str],
    *,
    home: Path,
    data_url: str,
    metadata_url: str,
    port: int,
    shop_url: str | None,
    parallelism: int = 6,
    credentials_key: str | None = None,
) -> dict[str, str]:
    """Airflow's settings for the demo. What ``base`` (the environment) sets wins, except ``AIRFLOW_HOME``:
    the demo's Airflow always lives in the project, never in a user's own Airflow home. Without a
    ``shop_url`` the settings are for another declaration than the demo's (``base`` names it).
    ``credentials_key`` encrypts the owners' credentials."""
    settings = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlalchemy_url(metadata_url),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",  # the demo is for this machine: not served to the network
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_server_ports(port)[0]),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(log_server_ports(port)[1]),
        "AIRFLOW__API__BASE_URL": f"http://localhost:{port}",
        "AIRFLOW__API__WORKERS": "1",
        # Tasks talk to the API server; on a small, busy machine its first answers can take longer than 5 s.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        # `airflow standalone` starts the scheduler before the API server listens, and a task handed out
        # then gave up after Airflow's 5 tries (jittered waits of at most 1, 2, 4 and 8 s): on a busy machine
        # every task's first try failed at start-up. 10 tries wait minutes for it (at most 5).
        "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW_CONN_SYNCLANE_DEFAULT": airflow_connection(data_url),
        "SYNCLANE_DECLARATION": "synclane_demo.sync:synclane",  # what the example DAGs run
        "SYNCLANE_QUEUE": "shops",
        "SYNCLANE_HEALTH_EVERY": "60",  # the health check every minute: the broken slice is reported soon after
        "SYNCLANE_DEMO_DATABASE_URL": data_url,
    }
    if shop_url is not None:
        settings["SYNCLANE_DEMO_SHOP_URL"] = shop_url
        settings[f"AIRFLOW_CONN_{OAUTH_CONN_ID.upper()}"] = oauth_connection(shop_url)
    if credentials_key is not None:
        settings["AIRFLOW__SYNCLANE__CREDENTIALS_KEY"] = credentials_key
    return {**settings, **base, "AIRFLOW_HOME": str(home)}


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def admin_password(home: Path) -> str | None:
    try:
        return json.loads((home / "simple_auth_manager_passwords.json.generated").read_text()).get("admin")
    except (OSError, ValueError):
        return None


def shop_service(env: Mapping[str, str], port: int, log_dir: Path) -> Service:
    return Service(
        "shop",
        [sys.executable, "-m", "synclane_demo.shop", "--port", str(port)],
        env={**env, "PYTHONUNBUFFERED": "1"},
        log_path=log_dir / "shop.log",
        cwd=PROJECT,
    )


def wait_for_shop(shop: Service, port: int) -> None:
    wait_for_http(f"http://127.0.0.1:{port}/health", timeout=30, service=shop)


def airflow_service(env: Mapping[str, str], log_dir: Path) -> Service:
    """``airflow standalone``; it starts its components as ``airflow ...`` from PATH, so our venv comes first."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join([bin_dir, env.get("PATH", os.defpath)])
    return Service(
        "airflow",
        [str(Path(bin_dir) / "airflow"), "standalone"],
        env={**env, "PATH": path},
        log_path=log_dir / "airflow.log",
        cwd=PROJECT,
    )


def wait_for_airflow(airflow: Service, port: int, *, timeout: float = 240) -> None:
    """Until the API answers and says the metadata DB, scheduler and triggerer are healthy."""
    wait_for_http(
        f"http://127.0.0.1:{port}/api/v2/monitor/health",
        timeout=timeout,
        service=airflow,
        ok=lambda body: all(
            (body.get(part) or {}).get("status") == "healthy" for part in ("metadatabase", "scheduler", "triggerer")
        ),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="scripts/demo", description="Run the SyncLane demo in Airflow on this machine."
    )
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", "8080")), help="Airflow UI port")
    parser.add_argument("--shop-port", type=int, default=int(os.environ.get("SHOP_PORT", "8081")))
    parser.add_argument("--home", type=Path, default=PROJECT / ".demo", help="where Airflow's home and the logs go")
    args = parser.parse_args(argv)

    server_url = os.environ.get("SYNCLANE_DATABASE_URL")
    if not server_url:
        sys.exit("SYNCLANE_DATABASE_URL is not set; start the demo with scripts/demo, which finds a PostgreSQL")
    for port in (args.port, args.shop_port, *log_server_ports(args.port)):
        if not port_free(port):
            sys.exit(
                f"port {port} is taken; set DEMO_PORT / SHOP_PORT (or --port / --shop-port) to free ones "
                f"(Airflow's log servers take the UI's port + {LOG_SERVER_OFFSET} and + {LOG_SERVER_OFFSET + 1})"
            )

    named = conninfo_to_dict(server_url).get("dbname")
    if named and named != "postgres":
        data_url = server_url
    else:
        ensure_database(server_url, DATA_DATABASE)
        data_url = with_database(server_url, DATA_DATABASE)
    ensure_database(server_url, AIRFLOW_DATABASE)
    metadata_url = with_database(server_url, AIRFLOW_DATABASE)
    Store(data_url, os.environ.get("SYNCLANE_DEMO_DATA_SCHEMA") or "demo").prepare()

    shop_url = f"http://127.0.0.1:{args.shop_port}"
    home = args.home.resolve() / "airflow"
    env = airflow_environment(
        os.environ,
        home=home,
        data_url=data_url,
        metadata_url=metadata_url,
        port=args.port,
        shop_url=shop_url,
        credentials_key=demo_credentials_key(args.home.resolve()),
    )
    log_dir = args.home.resolve() / "logs"
    started: list[Service] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        print("\nstopping: Airflow first (running jobs are handed back with their cursors), then the shop", flush=True)
        for service in reversed(started):
            service.stop()
        print("stopped.", flush=True)

    stop_on_signals()
    try:
        print(f"starting the shop on {shop_url} (log: {log_dir / 'shop.log'})", flush=True)
        shop = shop_service(env, args.shop_port, log_dir).start()
        started.append(shop)
        wait_for_shop(shop, args.shop_port)
        print("connecting the accounts at the shop: their OAuth tokens are set as the owners' credentials", flush=True)
        set_initial_credentials(env)
        print(
            f"starting Airflow (home: {home}; log: {log_dir / 'airflow.log'}); this takes about half a minute",
            flush=True,
        )
        airflow = airflow_service(env, log_dir).start()
        started.append(airflow)
        wait_for_airflow(airflow, args.port)
        print(banner(args.port, home, shop_url, data_url), flush=True)
        while all(service.running for service in started):
            time.sleep(1)
        dead = [s for s in started if not s.running]
        print(f"{dead[0].name} exited; its log ends with:\n{dead[0].tail()}", flush=True)
        failed = True
    except KeyboardInterrupt:
        failed = False
    finally:
        stop()
    sys.exit(1 if failed else 0)


def stop_on_signals() -> None:
    """Make Ctrl-C, a closed terminal and a plain ``kill`` raise KeyboardInterrupt, which stops the demo.

    The services run in sessions of their own, so no signal reaches them but through the launcher. SIGINT
    is set as well because a shell that starts the demo in the background starts it with SIGINT ignored.
    """
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _interrupt)


def _interrupt(*_: object) -> None:
    """The first signal stops the demo; later ones (Ctrl-C reaches both ``scripts/demo`` and the launcher, which
    passes it on) are ignored, so that none cuts the stopping short and leaves a process of Airflow running."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    raise KeyboardInterrupt


def demo_credentials_key(root: Path) -> str:
    """The key the demo encrypts owners' credentials with: the environment's, else one made once in ``root``
    (kept, so that credentials set in an earlier run can still be read)."""
    given = os.environ.get("AIRFLOW__SYNCLANE__CREDENTIALS_KEY")
    if given:
        return given
    path = root / "credentials.key"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(Fernet.generate_key().decode())
    return path.read_text().strip()


def banner(port: int, home: Path, shop_url: str, data_url: str) -> str:
    password = admin_password(home)
    login = (
        f"user admin, password {password}" if password else f"see {home}/simple_auth_manager_passwords.json.generated"
    )
    return f"""
SyncLane demo is running.

  Airflow UI   http://localhost:{port}    ({login})
  The shop     {shop_url}/control/status   (heal the broken page: curl -X POST {shop_url}/control/heal)
  Credentials  each account's OAuth tokens are set; umbrella's grant is revoked after its first pages:
               see the Owners view, and docs/tutorials/demo.md to reconnect it
  The jobs     psql "{data_url}" -c "select id, owner, type, status, cursor, processed_count, attempt_count, error from synclane.jobs order by id"

Press Ctrl-C to stop everything the demo started.
"""


if __name__ == "__main__":
    main()
