"""Airflow with the CeleryExecutor on this machine, as it runs on several: for the scale-out test and benchmark.

A :class:`CeleryCluster` has a metadata database of its own (created, and dropped on close), a Redis
database as Celery's broker, and the components started one by one in the order that works on a busy
machine: the database migrated, the API server listening and healthy first (a task that starts before it
listens fails its try), then the scheduler, the DAG processor, the triggerer and ``workers`` Celery
workers. Each component is a :class:`~synclane_demo.processes.Service`, so one worker can be killed alone
with everything it started, as when its machine dies.

Each Celery worker stands for a machine: its own Celery node name (``--celery-hostname``) and its own host
name for Airflow (``[core] hostname_callable``), which is what a task instance's ``hostname`` shows. The
workers share the Airflow home's log folder, so they serve no logs.

:func:`find_redis` finds the Redis: ``$SYNCLANE_TEST_REDIS_URL``, else the server at 127.0.0.1:6379 (in a
database of its own, claimed with a key and flushed afterwards), else Debian's ``redis-server`` started on
a free port.
"""

from __future__ import annotations

import os
import random
import re
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
from psycopg import sql

from synclane_demo.local import PROJECT, airflow_environment, sqlalchemy_url
from synclane_demo.processes import Service, wait_for_http
from tests.support.celery_workload import QUEUE, Workload
from tests.support.real_airflow import AirflowApi, clean_environment, free_port

LOCAL_REDIS = "redis://127.0.0.1:6379"
CLAIM_KEY = "synclane:claimed-by"
HOSTNAME_VARIABLE = "SYNCLANE_WORKER_HOSTNAME"
WORK_DAG = "synclane_work"


def worker_hostname() -> str:
    """``[core] hostname_callable`` of the Celery workers: the host name each stands for."""
    return os.environ[HOSTNAME_VARIABLE]


class RedisUnavailable(RuntimeError):
    """No Redis to use: none reachable and no ``redis-server`` to start."""


@dataclass
class RedisBroker:
    """A Redis database for one cluster; :meth:`close` empties it (and stops the server if we started it)."""

    url: str
    server: Service | None = None

    def close(self) -> None:
        try:
            if self.server is None:
                with redis.Redis.from_url(self.url, socket_timeout=5) as client:
                    client.flushdb()
        finally:
            if self.server is not None:
                self.server.stop(graceful=10)


def find_redis(log_dir: Path) -> RedisBroker:
    named = os.environ.get("SYNCLANE_TEST_REDIS_URL")
    if named:
        problem = _unreachable(named)
        if problem:
            raise RedisUnavailable(f"SYNCLANE_TEST_REDIS_URL={named} is not reachable: {problem}")
        return RedisBroker(_claim(named))
    problem = _unreachable(LOCAL_REDIS)
    if problem is None:
        return RedisBroker(_claim(LOCAL_REDIS))
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisUnavailable(
            f"no Redis at {LOCAL_REDIS} ({problem}) and no redis-server to start (apt-get install redis-server)"
        )
    port = free_port()
    server = Service(
        "redis",
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(log_dir)],
        env=clean_environment(),
        log_path=log_dir / "redis.log",
    ).start()
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 30
    while (problem := _unreachable(url)) is not None:
        if not server.running or time.monotonic() > deadline:
            server.stop(graceful=5)
            raise RedisUnavailable(f"redis-server did not start on port {port}: {problem}\n{server.tail()}")
        time.sleep(0.1)
    return RedisBroker(url, server)


def _unreachable(url: str) -> str | None:
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3) as client:
            client.ping()
        return None
    except (redis.RedisError, OSError) as exc:
        return str(exc) or type(exc).__name__


def _claim(server_url: str) -> str:
    """A database of a shared Redis that nobody else uses: empty, and marked ours by a key set only if absent."""
    base = re.sub(r"/\d*$", "", server_url.rstrip("/"))
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    for number in random.sample(range(1, 16), 15):
        url = f"{base}/{number}"
        with redis.Redis.from_url(url, socket_timeout=5) as client:
            if client.set(CLAIM_KEY, token, nx=True, ex=6 * 3600):
                if client.dbsize() == 1:
                    return url
                client.delete(CLAIM_KEY)  # someone's data is there without a claim: not ours
    raise RedisUnavailable(f"every database of {base} (1-15) is in use")


@dataclass
class CeleryCluster:
    """Airflow's components with the CeleryExecutor; ``workers`` Celery workers of ``concurrency`` processes each."""

    server_url: str
    """A PostgreSQL server (any database on it): the metadata database is created there."""
    broker_url: str
    workload: Workload
    home: Path
    workers: int = 2
    concurrency: int = 3
    idle_timeout: int = 20
    heartbeat_timeout: int = 30
    """Seconds without a heartbeat before the scheduler gives up on a running task (Airflow's default: 300)."""
    port: int = field(default_factory=free_port)
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    migrated_metadata: Callable[[str], None] | None = None
    """Makes the metadata database by name already migrated (the tests' ``airflow_metadata``); else it is
    created empty and ``airflow db migrate`` run on it."""
    services: dict[str, Service] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    api: AirflowApi | None = None

    @property
    def metadata_database(self) -> str:
        return f"synclane_celery_airflow_{self.suffix}"

    @property
    def hostnames(self) -> list[str]:
        return [f"celery-{n}" for n in range(1, self.workers + 1)]

    def worker(self, hostname: str) -> Service:
        return self.services[hostname]

    def environment(self) -> dict[str, str]:
        metadata_url = psycopg.conninfo.make_conninfo(self.server_url, dbname=self.metadata_database)
        bin_dir = str(Path(sys.executable).parent)
        base = clean_environment()
        tasks = max(8, 2 * self.workers * self.concurrency)
        env = airflow_environment(
            base,
            home=self.home / "airflow",
            data_url=self.workload.database_url,
            metadata_url=metadata_url,
            port=self.port,
            shop_url=None,
            parallelism=tasks,
        )
        env.update(
            {
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(tasks),
                "PATH": os.pathsep.join([bin_dir, base.get("PATH", os.defpath)]),
                "PYTHONPATH": str(PROJECT),  # Airflow's processes import the workload from tests/
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CELERY__BROKER_URL": self.broker_url,
                "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + sqlalchemy_url(metadata_url),
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.concurrency),
                # Celery queue of this cluster's own: another cluster on the same Redis never takes its tasks.
                "AIRFLOW__OPERATORS__DEFAULT_QUEUE": f"synclane-{self.suffix}",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # the worker DAG is unpaused when asked
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(self.heartbeat_timeout),
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                # Components on several machines must share these; here they are the same processes' settings.
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
                # A few metadata connections per process: the PostgreSQL server is shared.
                "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE": "2",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_MAX_OVERFLOW": "4",
                "SYNCLANE_DECLARATION": "tests.support.celery_workload:synclane",
                "SYNCLANE_QUEUE": QUEUE,
                "SYNCLANE_IDLE_TIMEOUT": str(self.idle_timeout),
                **self.workload.environment(),
            }
        )
        return env

    def _migrate(self, env: dict[str, str], logs: Path, *, timeout: float) -> None:
        """Create the metadata database and run ``airflow db migrate`` on it."""
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.metadata_database)))
        with open(logs / "db-migrate.log", "wb") as log:
            migrated = subprocess.run(
                [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                env=env,
                cwd=PROJECT,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        if migrated.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{(logs / 'db-migrate.log').read_text()[-3000:]}")

    def start(self, *, timeout: float = 300) -> "CeleryCluster":
        """Create the metadata database and start every component; return when all are healthy."""
        deadline = time.monotonic() + timeout
        env = self.environment()
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        if self.migrated_metadata is not None:
            self.migrated_metadata(self.metadata_database)
        else:
            self._migrate(env, logs, timeout=max(deadline - time.monotonic(), 1))

        def start(name: str, *args: str, extra: dict[str, str] | None = None) -> Service:
            service = Service(
                name,
                [str(Path(sys.executable).parent / "airflow"), *args],
                env={**env, **(extra or {})},
                log_path=logs / f"{name}.log",
                cwd=PROJECT,
            )
            self.services[name] = service.start()
            return service

        api_server = start("api-server", "api-server", "--port", str(self.port))
        wait_for_http(
            self.health_url,
            timeout=deadline - time.monotonic(),
            service=api_server,
            ok=lambda body: _healthy(body, "metadatabase"),
        )
        for component in ("scheduler", "dag-processor", "triggerer"):
            start(component, component)
        for hostname in self.hostnames:
            start(
                hostname,
                "celery",
                "worker",
                "--celery-hostname",
                f"{hostname}@%h",
                "--skip-serve-logs",
                extra={HOSTNAME_VARIABLE: hostname, "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.worker_hostname"},
            )
        self.wait(lambda: self._ready(), deadline - time.monotonic(), "every component healthy and every worker ready")
        self.api = AirflowApi(f"http://127.0.0.1:{self.port}", self.home / "airflow")
        self.wait(lambda: self._parsed(WORK_DAG), deadline - time.monotonic(), f"the DAG {WORK_DAG} parsed")
        return self

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v2/monitor/health"

    def _ready(self) -> bool:
        try:
            body = wait_for_http(self.health_url, timeout=10)
        except TimeoutError:
            return False
        if not _healthy(body, "metadatabase", "scheduler", "triggerer", "dag_processor"):
            return False
        return all(
            f"{hostname}@" in log and " ready." in log
            for hostname in self.hostnames
            for log in [self.worker(hostname).tail(400)]
        )

    def _parsed(self, dag_id: str) -> bool:
        try:
            return self.api.get(f"/api/v2/dags/{dag_id}")["dag_id"] == dag_id
        except OSError:  # 404 until the DAG processor has written it
            return False

    def unpause(self, dag_id: str = WORK_DAG) -> None:
        self.api.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def wait(self, condition: Callable[[], object], timeout: float, what: str, *, every: float = 0.5) -> object:
        """Poll ``condition`` until it returns something true; fail when a component (not a killed one) died."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            dead = [s for name, s in self.services.items() if not s.running and name not in self.killed]
            if dead:
                raise RuntimeError(
                    f"{dead[0].name} exited while waiting for {what}; its log ends with:\n{dead[0].tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.tails()}")
            time.sleep(every)

    def kill_worker(self, hostname: str) -> list[int]:
        """SIGKILL a Celery worker and every process it started (its task processes included), at once."""
        self.killed.add(hostname)
        return self.worker(hostname).kill()

    def tails(self, lines: int = 15) -> str:
        return "\n".join(f"--- {name}\n{service.tail(lines)}" for name, service in self.services.items())

    def close(self) -> None:
        """Stop every component and drop the metadata database: the scheduler first (it hands out nothing more),
        then the Celery workers, the triggerer and the DAG processor side by side, each waiting for its own processes
        to end, the API server last (what stops still reports to it)."""
        try:
            for names in (["scheduler"], [*self.hostnames, "triggerer", "dag-processor"], ["api-server"]):
                stopping = [self.services[name] for name in names if name in self.services]
                with ThreadPoolExecutor(max(len(stopping), 1)) as pool:
                    list(pool.map(lambda service: service.stop(graceful=15), stopping))
        finally:
            with psycopg.connect(self.server_url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.metadata_database))
                )


def _healthy(body: dict | None, *parts: str) -> bool:
    return body is not None and all((body.get(part) or {}).get("status") == "healthy" for part in parts)
