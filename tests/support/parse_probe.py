"""Parses the dags/ folder the way Airflow's DAG processor does, recording every attempt to reach a database.

Run as a script (``python -m tests.support.parse_probe``) by test_dags.py, in
a fresh process so that nothing imported earlier hides an import-time
connection. Prints one JSON line: DAG ids, import errors, parse seconds, and
the connection attempts seen.
"""

from __future__ import annotations

import json
import socket
import sys
import time

attempts: list[str] = []


def _record(kind: str, original):
    def wrapper(*args, **kwargs):
        attempts.append(kind)
        return original(*args, **kwargs)

    return wrapper


def main(dags_folder: str) -> None:
    import psycopg

    psycopg.connect = _record("psycopg.connect", psycopg.connect)
    psycopg.Connection.connect = classmethod(_record("psycopg.Connection.connect", psycopg.Connection.connect.__func__))
    psycopg.AsyncConnection.connect = classmethod(
        _record("psycopg.AsyncConnection.connect", psycopg.AsyncConnection.connect.__func__)
    )
    original_socket_connect = socket.socket.connect

    def socket_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(f"socket.connect {address!r}")
        return original_socket_connect(sock, address)

    socket.socket.connect = socket_connect

    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseHook

    BaseHook.get_connection = classmethod(_record("BaseHook.get_connection", BaseHook.get_connection.__func__))

    started = time.monotonic()
    bag = DagBag(dag_folder=dags_folder)
    seconds = time.monotonic() - started
    print(
        json.dumps(
            {
                "dags": sorted(bag.dags),
                "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
                "seconds": seconds,
                "attempts": attempts,
                "tasks": {dag_id: sorted(dag.task_dict) for dag_id, dag in bag.dags.items()},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
