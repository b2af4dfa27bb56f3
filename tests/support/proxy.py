"""A TCP proxy in front of PostgreSQL that breaks connections the way networks and servers do.

Tests connect the engine through it (real connections, real server) and then:

* ``lose_reply(marker)``: the next statement whose text matches ``marker`` reaches
  the server and runs to the end (committed, in autocommit), but its reply is
  swallowed and the connection dropped, as when a network fails after the server
  answered;
* ``black_out()`` / ``restore()``: drop every connection and refuse new ones until
  restored, as when the database is away; ``refused`` counts the connection
  attempts turned away.

It frames the server's side of the protocol (type byte, then a length), so the
client must not ask for TLS or GSS encryption: use :meth:`Proxy.conninfo`.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
from urllib.parse import urlsplit

READY_FOR_QUERY = b"Z"


class Proxy:
    def __init__(self, database_url: str) -> None:
        target = urlsplit(database_url)
        self._target = (target.hostname or "127.0.0.1", target.port or 5432)
        self._database_url = database_url
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._marker: re.Pattern[bytes] | None = None
        self._blacked_out = False
        self._closed = False
        self.refused = 0
        self.accepted = 0
        self.reply_lost = threading.Event()
        self.refusal = threading.Condition(self._lock)
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def conninfo(self) -> str:
        """The database URL, pointed at the proxy, without encryption (the proxy reads the server's messages)."""
        parts = urlsplit(self._database_url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        netloc = f"{netloc[0]}@{host}" if len(netloc) == 2 else host
        query = "&".join(filter(None, [parts.query, "sslmode=disable", "gssencmode=disable"]))
        return parts._replace(netloc=netloc, query=query).geturl()

    def lose_reply(self, marker: re.Pattern[bytes]) -> threading.Event:
        """Swallow the server's reply to the next statement matching ``marker``, then drop that connection."""
        with self._lock:
            self._marker = marker
            self.reply_lost.clear()
        return self.reply_lost

    def black_out(self) -> None:
        """Drop every connection and turn new ones away until :meth:`restore`."""
        with self._lock:
            self._blacked_out = True
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _drop(*pair)

    def restore(self) -> None:
        with self._lock:
            self._blacked_out = False

    def wait_for_refusals(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` connection attempts in all were turned away."""
        with self.refusal:
            return self.refusal.wait_for(lambda: self.refused >= count, timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs, self._pairs = self._pairs, []
        self._listener.close()
        for pair in pairs:
            _drop(*pair)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    client.close()
                    return
                if self._blacked_out:
                    self.refused += 1
                    self.refusal.notify_all()
                    _drop(client)
                    continue
                self.accepted += 1
            try:
                server = socket.create_connection(self._target)
            except OSError:
                _drop(client)
                continue
            with self._lock:
                self._pairs.append((client, server))
            state = {"swallow": False}
            threading.Thread(target=self._upstream, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._downstream, args=(client, server, state), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket, state: dict) -> None:
        """Client to server, unchanged; notes when the armed statement goes by (in a Parse or Query message)."""
        buffer, started = b"", False
        try:
            while data := client.recv(65536):
                buffer += data
                while True:
                    if not started:  # the startup message has a length but no type byte
                        if len(buffer) < 4:
                            break
                        size = struct.unpack("!I", buffer[:4])[0]
                        if len(buffer) < size:
                            break
                        buffer, started = buffer[size:], True
                        continue
                    if len(buffer) < 5:
                        break
                    size = 1 + struct.unpack("!I", buffer[1:5])[0]
                    if len(buffer) < size:
                        break
                    message, buffer = buffer[:size], buffer[size:]
                    if message[:1] in (b"P", b"Q"):
                        with self._lock:
                            if self._marker is not None and self._marker.search(message):
                                self._marker = None
                                state["swallow"] = True
                server.sendall(data)
        except OSError:
            pass
        _drop(client, server)

    def _downstream(self, client: socket.socket, server: socket.socket, state: dict) -> None:
        """Server to client, message by message; an armed reply is dropped up to ReadyForQuery, then so is the line."""
        buffer = b""
        try:
            while data := server.recv(65536):
                buffer += data
                while len(buffer) >= 5:
                    length = struct.unpack("!I", buffer[1:5])[0]
                    if len(buffer) < 1 + length:
                        break
                    message, buffer = buffer[: 1 + length], buffer[1 + length :]
                    if not state["swallow"]:
                        client.sendall(message)
                    elif message[:1] == READY_FOR_QUERY:
                        _drop(client, server)
                        self.reply_lost.set()
                        return
        except OSError:
            pass
        _drop(client, server)


def _drop(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
