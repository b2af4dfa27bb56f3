"""The demo's settings come from the environment, and importing the declaration touches nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import timedelta

import pytest

from synclane_demo.settings import DemoSettings, duration
from synclane_demo.sync import build


def test_defaults_are_the_demo_a_user_meets():
    settings = DemoSettings.from_env({})
    assert settings.horizon == timedelta(days=730) and settings.slice == timedelta(days=30)
    queue = build(settings).queue("shops")
    assert [t.name for t in queue.types] == ["products", "orders"]
    assert queue.types[1].every == timedelta(minutes=5) and queue.types[1].overlap == timedelta(minutes=1)


def test_every_setting_can_be_compressed_from_the_environment():
    settings = DemoSettings.from_env(
        {
            "SYNCLANE_DEMO_HORIZON": "90d",
            "SYNCLANE_DEMO_LEASE": "15s",
            "SYNCLANE_DEMO_RETRY_DELAY": "0.5",
            "SYNCLANE_DEMO_ORDERS_EVERY": "2m",
            "SYNCLANE_DEMO_CONCURRENCY": "2",
            "SYNCLANE_DEMO_SHOP_URL": "http://shop:8081",
            "SYNCLANE_DEMO_SCHEMA": "",  # empty means unset
            "OTHER": "ignored",
        }
    )
    assert settings.horizon == timedelta(days=90) and settings.lease == timedelta(seconds=15)
    assert settings.retry_delay == timedelta(seconds=0.5) and settings.orders_every == timedelta(minutes=2)
    assert settings.concurrency == 2 and settings.shop_url == "http://shop:8081" and settings.schema == "synclane"


@pytest.mark.parametrize("name, value", [("SYNCLANE_DEMO_LEASE", "soon"), ("SYNCLANE_DEMO_CONCURRENCY", "two")])
def test_a_bad_value_names_its_variable(name, value):
    with pytest.raises(ValueError, match=name):
        DemoSettings.from_env({name: value})


def test_an_impossible_declaration_is_refused_when_built():
    with pytest.raises(ValueError, match="overlap"):
        build(DemoSettings(orders_every=timedelta(minutes=1), overlap=timedelta(minutes=2)))


def test_durations():
    assert (
        duration("730d") == timedelta(days=730)
        and duration(" 2h ") == timedelta(hours=2)
        and duration("7") == timedelta(seconds=7)
    )
    with pytest.raises(ValueError):
        duration("5 weeks")


def test_importing_the_declaration_opens_no_connection():
    """Airflow imports it whenever it parses DAG files: it must not reach the database or the shop."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        env = {
            "SYNCLANE_DEMO_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/postgres",
            "SYNCLANE_DEMO_SHOP_URL": f"http://127.0.0.1:{port}",
            "PATH": "/usr/bin:/bin",
        }
        probe = "import synclane_demo.sync as s; print(s.synclane.queue('shops').name)"
        result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "shops"
        with pytest.raises(TimeoutError):
            listener.accept()
