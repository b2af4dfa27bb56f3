"""docker-compose.yaml cannot be run here (no Docker engine), so it is checked offline: it parses, and
everything it and its Dockerfile refer to exists in the project."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
from pathlib import Path

import yaml

from synclane_demo.settings import DemoSettings
from synclane_demo.shop.__main__ import parse as parse_shop_args

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ROOT = "/opt/synclane/"


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_it_runs_postgres_the_shop_and_airflow_on_8080():
    services = compose()["services"]
    assert set(services) == {"postgres", "shop", "airflow"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert "8080:8080" in services["airflow"]["ports"] and "8081:8081" in services["shop"]["ports"]
    assert services["airflow"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_every_file_it_refers_to_exists():
    for name, service in compose()["services"].items():
        if "build" in service:
            context = ROOT / (service["build"] if isinstance(service["build"], str) else service["build"]["context"])
            assert (context / "Dockerfile").is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
        for value in service.get("environment", {}).values():
            if str(value).startswith(IMAGE_ROOT):
                assert (ROOT / str(value)[len(IMAGE_ROOT):]).exists(), f"{name} names {value}, not in the image"


def test_the_dockerfile_copies_only_what_exists_and_installs_the_project():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:", dockerfile, re.MULTILINE)
    copied = [
        source
        for line in dockerfile.splitlines() if line.startswith("COPY")
        for source in line.split()[1:-1] if not source.startswith("--")
    ]
    assert {"pyproject.toml", "synclane_provider", "synclane_demo", "dags"} <= set(copied)
    for source in copied:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"


def test_the_commands_and_settings_it_uses_are_ours():
    services = compose()["services"]
    shop_command = services["shop"]["command"]
    assert shop_command[:3] == ["python", "-m", "synclane_demo.shop"]
    args = parse_shop_args(shop_command[3:])
    assert (args.host, args.port) == ("0.0.0.0", 8081)
    assert all(key.startswith("SHOP_") for key in services["shop"]["environment"])
    for module in re.findall(r"python -m ([\w.]+)", " ".join(services["airflow"]["command"])):
        assert importlib.util.find_spec(module) is not None, module
    env = services["airflow"]["environment"]
    module, _, attribute = env["SYNCLANE_DECLARATION"].partition(":")
    declared = getattr(importlib.import_module(module), attribute)
    assert declared.queue(env["SYNCLANE_QUEUE"])
    settings = DemoSettings.from_env(env)
    assert settings.shop_url == "http://shop:8081" and settings.database_url.endswith("@postgres:5432/synclane")
    assert env["AIRFLOW_CONN_SYNCLANE_DEFAULT"].endswith("@postgres:5432/synclane")
    assert "synclane_airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert "synclane_airflow" in (ROOT / "docker/postgres-init.sql").read_text()
    json.dumps(compose())  # nothing YAML-only (dates, anchors left unresolved) in it

