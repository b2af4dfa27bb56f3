"""A StatsD server for tests: a UDP socket on 127.0.0.1 that keeps every packet it is sent."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections import defaultdict

PACKET = re.compile(r"^(?P<name>[^:,]+)(?P<tags>(?:,[^:]+)?):(?P<value>[-\d.]+)\|(?P<type>c|ms|g)$")


class Listener:
    """A UDP socket on 127.0.0.1 read on a thread of its own as packets come (the kernel's buffer holds only a
    few hundred datagrams: read after the run, the rest would be dropped)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="statsd-listener", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535).decode()
            except socket.timeout:
                continue
            self.last = time.monotonic()
            self.lines.extend(data.splitlines())

    def received(self, *, settle: float = 0.5, prefix: str = "") -> dict[str, list[tuple[str, str, float]]]:
        """Every packet so far whose name starts with ``prefix``, by name: (tags, type, value), once none came
        for ``settle`` s."""
        while time.monotonic() - self.last < settle:
            time.sleep(0.05)
        packets: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        for line in list(self.lines):
            if not line.startswith(prefix):
                continue
            match = PACKET.match(line)
            assert match, f"not a StatsD packet: {line!r}"
            packets[match["name"]].append((match["tags"], match["type"], float(match["value"])))
        return packets

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
