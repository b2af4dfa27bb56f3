"""Create the demo's tables and connect its five accounts: ``python -m synclane_demo.prepare``.

Safe to repeat: an account someone disconnected stays disconnected. The demo
command and docker-compose run it before Airflow starts; SyncLane's own table
is created by the engine on first use.
"""

from __future__ import annotations

from synclane_demo.settings import DemoSettings
from synclane_demo.store import Store


def main() -> None:
    settings = DemoSettings.from_env()
    if not settings.database_url:
        raise SystemExit("set SYNCLANE_DEMO_DATABASE_URL to the database the demo may use")
    Store(settings.database_url, settings.data_schema).prepare()
    print(f"demo tables ready in schema {settings.data_schema!r}; accounts connected")


if __name__ == "__main__":
    main()
