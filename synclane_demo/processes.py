"""Starting and stopping the demo's long-running processes: each in its own process group.

``airflow standalone`` starts a scheduler, a DAG processor, a triggerer and an
API server as children, and they start executor workers and task processes. A
SIGTERM to the parent alone orphans them and they keep scheduling, so each
service is started in a session of its own and stopped as a group. SIGTERM to
the whole group is what makes running tasks stop gracefully: Airflow's task
runner calls the operator's ``on_kill`` on SIGTERM (SyncLane's worker hands its
job back with its cursor), while SIGINT interrupts the task mid-page. What is
still alive after a bounded wait gets SIGKILL.
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
from pathlib import Path


class Service:
    """One started command and its process group, with its output in a log file."""

    def __init__(self, name: str, command: Sequence[str], *, env: Mapping[str, str], log_path: Path, cwd: Path | None = None):
        self.name = name
        self.command = list(command)
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self.process: subprocess.Popen | None = None

    def start(self) -> "Service":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
        self.process = subprocess.Popen(
            self.command, env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        log.close()
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, graceful: float = 60.0, forced: float = 10.0) -> int | None:
        """Stop the whole group: SIGTERM, wait up to ``graceful`` s for every member to exit, then SIGKILL."""
        if self.process is None:
            return None
        for sig, wait in ((signal.SIGTERM, graceful), (signal.SIGKILL, forced)):
            if not self._group_alive():
                break
            self._signal_group(sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self._group_alive():
                time.sleep(0.2)
        try:
            return self.process.wait(timeout=forced)
        except subprocess.TimeoutExpired:
            return None

    def _group_alive(self) -> bool:
        self.process.poll()  # reap the leader if it exited, so that it does not count as alive
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _group_has_live_members(self.process.pid)

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
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            return True
    return False


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
