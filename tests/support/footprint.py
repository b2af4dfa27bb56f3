"""What a running Airflow costs, sampled several times a second: client connections to one database (by
``application_name``), the resident memory of its task processes, and how many jobs run.

Airflow 3's task process names itself ``airflow worker -- <task instance id>`` (the LocalExecutor's process that
supervises it is ``airflow worker -- LocalExecutor: …``); only processes of the given
:class:`~synclane_demo.processes.Service` are looked at, so another Airflow on the machine is not counted.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from synclane_demo.processes import Service

TASK_PROCESS = re.compile(r"^airflow worker -- ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")
OBSERVER = "synclane-test-observer"
"""The ``application_name`` of the sampler's own connection, left out of the counts."""


@dataclass
class TaskProcess:
    """One task process as sampled: its task instance's id, and the most it held (kB, threads)."""

    pid: int
    ti_id: str
    peak_rss_kb: int = 0
    high_water_kb: int = 0
    """The kernel's own peak (``VmHWM``), which no sampling interval misses."""
    peak_threads: int = 0


class Footprint(threading.Thread):
    """Samples the jobs database ``database_url`` (its ``schema``) and the task processes of ``airflow`` every
    ``every`` seconds until :meth:`stop`; what made it stop early is raised there."""

    def __init__(self, database_url: str, schema: str, airflow: Service, *, every: float = 0.2) -> None:
        super().__init__(name="footprint", daemon=True)
        self.database_url, self.schema, self.airflow, self.every = database_url, schema, airflow, every
        self.connections_peak = 0
        """The most client connections to the database at once, the observer's left out."""
        self.connections_peak_by_name: Counter[str] = Counter()
        """Per ``application_name``, the most at once."""
        self.running = 0
        """Jobs running at the last sample."""
        self.running_peak = 0
        self.tasks: dict[int, TaskProcess] = {}
        self.samples = 0
        self.error: BaseException | None = None
        self._done = threading.Event()

    def run(self) -> None:
        clients = (
            "SELECT coalesce(application_name, '') AS name, count(*) AS n FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend' AND application_name <> %s "
            "GROUP BY 1"
        )
        running = sql.SQL("SELECT count(*) FROM {}.jobs WHERE status = 'running'").format(sql.Identifier(self.schema))
        try:
            with psycopg.connect(self.database_url, autocommit=True, application_name=OBSERVER) as conn:
                while not self._done.wait(self.every):
                    by_name = dict(conn.execute(clients, [OBSERVER]).fetchall())
                    self.connections_peak = max(self.connections_peak, sum(by_name.values()))
                    for name, count in by_name.items():
                        self.connections_peak_by_name[name] = max(self.connections_peak_by_name[name], count)
                    self.running = conn.execute(running).fetchone()[0]
                    self.running_peak = max(self.running_peak, self.running)
                    self._sample_processes()
                    self.samples += 1
        except BaseException as exc:  # noqa: BLE001 - handed to the test by stop()
            self.error = exc

    def _sample_processes(self) -> None:
        for pid in self.airflow.members():
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                status = dict(
                    line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
                )
            except OSError:
                continue  # gone while we looked
            named = TASK_PROCESS.match(title)
            if named is None:
                continue
            task = self.tasks.setdefault(pid, TaskProcess(pid, named.group(1)))
            task.peak_rss_kb = max(task.peak_rss_kb, _kb(status.get("VmRSS")))
            task.high_water_kb = max(task.high_water_kb, _kb(status.get("VmHWM")))
            task.peak_threads = max(task.peak_threads, int(status.get("Threads", "0")))

    def stop(self) -> None:
        self._done.set()
        if self.ident is None:
            return
        self.join(timeout=10)
        if self.is_alive():
            raise TimeoutError("the footprint sampler did not stop within 10 s")
        if self.error is not None:
            raise RuntimeError("the footprint sampler stopped early") from self.error


def _kb(value: str | None) -> int:
    """``VmRSS:\\t  123456 kB`` as 123456."""
    return int(value.split()[0]) if value else 0
