"""Starting and stopping the demo's long-running processes: each in its own process group.

``airflow standalone`` starts a scheduler, a DAG processor, a triggerer and an
API server as children, and they start executor workers and task processes. A
SIGTERM to the parent alone orphans them and they keep scheduling, so each
service is started in a session of its own and stopped as a group. SIGTERM to
the whole group is what makes running tasks stop gracefully: Airflow's task
runner calls the operator's ``on_kill`` on SIGTERM (SyncLane's worker hands its
job back with its cursor), while SIGINT interrupts the task mid-page. What is
still alive after a bounded wait gets SIGKILL.

Airflow puts each task runner in a process group of its own, so a group is not
all of a service. A service also counts every descendant of its group that it
has seen (found through parent links while the parents live, and remembered when
they die), and :meth:`Service.kill` ends all of them the way a machine dies:
frozen first so that nothing forks or reparents, then SIGKILL, nothing handed back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class Service:
    """One started command and its process group, with its output in a log file."""

    def __init__(
        self, name: str, command: Sequence[str], *, env: Mapping[str, str], log_path: Path, cwd: Path | None = None
    ):
        self.name = name
        self.command = list(command)
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self.process: subprocess.Popen | None = None
        self._seen: dict[int, str] = {}  # pid: start time, of every process of the service seen so far

    def start(self) -> "Service":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            cwd=self.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, graceful: float = 60.0, forced: float = 10.0, signal_first: int = signal.SIGTERM) -> int | None:
        """Stop the whole group: SIGTERM (or SIGINT, as Ctrl-C in a terminal sends), wait up to ``graceful`` s
        for every member to exit, then SIGKILL every process of the service, in its group or not."""
        if self.process is None:
            return None
        if self.members():
            self._signal_group(signal_first)
            deadline = time.monotonic() + graceful
            while time.monotonic() < deadline and self.members():
                time.sleep(0.2)
        if self.members():
            try:
                self.kill(timeout=forced)
            except TimeoutError:
                return None  # stuck in the kernel: no signal helps
        try:
            return self.process.wait(timeout=forced)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, *, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process of the service at once, as when its machine dies; returns the pids killed.

        All are stopped (SIGSTOP) first, until no new one appears, so that none forks a child or loses
        its parent while the others are killed.
        """
        if self.process is None:
            return []
        deadline = time.monotonic() + timeout
        frozen: list[int] = []
        while new := [pid for pid in self.members() if pid not in frozen]:
            for pid in new:
                self._signal(pid, signal.SIGSTOP)
            frozen.extend(new)
            if time.monotonic() > deadline:
                break
        for pid in frozen:
            self._signal(pid, signal.SIGKILL)
        while left := self.members():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: processes {left} survived SIGKILL for {timeout:.0f}s")
            for pid in left:
                self._signal(pid, signal.SIGKILL)
            time.sleep(0.05)
        return frozen

    def members(self) -> list[int]:
        """The live processes of the service: its process group, their descendants, and every process of
        it seen before that still lives (a child whose parent died is no longer found through its parent)."""
        if self.process is None:
            return []
        self.process.poll()  # reap the leader if it exited, so that it does not count as alive
        table = _process_table()
        alive = {pid for pid, started in self._seen.items() if pid in table and table[pid].started == started}
        alive |= {pid for pid, entry in table.items() if entry.group == self.process.pid}
        children: dict[int, list[int]] = {}
        for pid, entry in table.items():
            children.setdefault(entry.parent, []).append(pid)
        found, todo = set(), list(alive)
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo.extend(children.get(pid, ()))
        self._seen.update((pid, table[pid].started) for pid in found)
        return sorted(pid for pid in found if table[pid].state not in ("Z", "X"))

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def _group_has_live_members(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is alive and not a zombie (Linux /proc)."""
    if not Path("/proc").is_dir():
        return True
    return any(entry.group == pgid and entry.state != "Z" for entry in _process_table().values())


@dataclass(frozen=True)
class _Process:
    parent: int
    group: int
    state: str
    started: str
    """Start time in clock ticks after boot: with the pid, names one process even when pids are reused."""


def _process_table() -> dict[int, _Process]:
    """Every process of the machine (Linux /proc), by pid."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone while we looked
        table[int(entry.name)] = _Process(
            parent=int(fields[1]), group=int(fields[2]), state=fields[0], started=fields[19]
        )
    return table


def wait_for_http(url: str, *, timeout: float, service: Service | None = None, ok=lambda body: True) -> dict | None:
    """Poll ``url`` until it answers 200 with a body ``ok`` accepts; fail early if ``service`` died."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if service is not None and not service.running:
            raise RuntimeError(f"{service.name} exited while starting; its log ends with:\n{service.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.loads(response.read() or b"null")
                if ok(body):
                    return body
                last = body
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = exc
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not become ready in {timeout:.0f}s (last: {last})")
