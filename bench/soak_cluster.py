"""A private PostgreSQL cluster for the soak: Debian's binaries, a temp data directory, a port of its own.

The soak restarts and crashes its server on purpose, which it must never do to the shared server other
engineers test on; so it starts a cluster of its own with ``initdb`` and ``pg_ctl`` and removes it at the
end. ``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINARIES = Path(os.environ.get("SOAK_PG_BIN", "/usr/lib/postgresql/15/bin"))

SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": "60",
    "shared_buffers": "32MB",
    "fsync": "on",  # an immediate stop must cost what it costs on a real server
    "log_line_prefix": "%m [%p] %a ",
    "log_min_messages": "warning",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """initdb, start, restart (fast or immediate), stop and remove one throw-away cluster."""

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="synclane-soak-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.settings = {
            **SETTINGS,
            **(settings or {}),
            "unix_socket_directories": str(self.root),
            "port": str(self.port),
        }
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BINARIES / args[0]), *args[1:]],
            user=self._user,
            capture_output=True,
            text=True,
            check=check,
            cwd=self.root,
        )

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(self.data / "postgresql.auto.conf", "a") as conf:
            for name, value in self.settings.items():
                conf.write(f"{name} = '{value}'\n")

    def start(self) -> None:
        done = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120", "start", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the private cluster did not start: {done.stderr}\n{self.tail()}")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: clean shutdown (sessions ended, checkpoint); ``immediate``: a crash, recovered at start."""
        done = self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "120", "stop", check=False)
        if done.returncode != 0 and self.running():
            raise RuntimeError(f"the private cluster did not stop ({mode}): {done.stderr}")

    def restart(self, mode: str) -> None:
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def count_in_log(self, text: str) -> int:
        try:
            return self.log.read_text(errors="replace").count(text)
        except OSError:
            return 0

    def remove(self) -> None:
        """Stop the server if it runs (immediately: nothing in it is kept) and delete its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PrivateCluster":
        try:
            self.init()
            self.start()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def wait_until_accepting(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self._run("pg_isready", "-h", "127.0.0.1", "-p", str(self.port), check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the private cluster does not accept connections\n{self.tail()}")
            time.sleep(0.05)
