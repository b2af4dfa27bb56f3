"""docker-compose.yaml cannot be run here (no Docker engine), so it is checked offline: it parses, each
profile runs what it says, and everything it and its Dockerfile refer to exists in the project.

Compose runs the services without a profile and those of the active profiles: the ones named with
``--profile``, else those of ``COMPOSE_PROFILES`` (which ``.env`` sets to ``local``)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from synclane_demo.connect import OAUTH_CONN_ID, oauth_connection
from synclane_demo.settings import DemoSettings
from synclane_demo.shop.__main__ import parse as parse_shop_args
from synclane_provider.core.credentials import Sealer

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ROOT = "/opt/synclane/"


CELERY_AIRFLOW = {
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker-1",
    "airflow-worker-2",
}


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def env_file(path: Path) -> dict[str, str]:
    """A compose env file: ``KEY=VALUE`` lines; blank lines and ``#`` comments skipped."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def default_profiles() -> set[str]:
    return set(env_file(ROOT / ".env")["COMPOSE_PROFILES"].split(","))


def active(profiles: set[str]) -> dict[str, dict]:
    """The services compose runs with these profiles active."""
    return {
        name: service
        for name, service in compose()["services"].items()
        if not service.get("profiles") or profiles & set(service["profiles"])
    }


def environment(service: dict) -> dict[str, str]:
    """What a service's processes see: its env files, then its ``environment`` (which wins, as in compose)."""
    files = service.get("env_file", [])
    merged: dict[str, str] = {}
    for path in [files] if isinstance(files, str) else files:
        merged.update(env_file(ROOT / path))
    merged.update({key: str(value) for key, value in service.get("environment", {}).items()})
    return merged


def airflow_commands(service: dict) -> list[list[str]]:
    """The ``airflow ...`` commands a service runs, also inside ``bash -c "... && exec airflow ..."``."""
    command = service.get("command", [])
    lines = (
        [shlex.split(part) for part in re.split(r"&&|;", command[2])] if command[:2] == ["bash", "-c"] else [command]
    )
    lines = [words[1:] if words[:1] == ["exec"] else words for words in lines]
    return [words[1:] for words in lines if words[:1] == ["airflow"]]


def test_without_a_profile_it_runs_postgres_the_shop_and_airflow_on_8080():
    assert default_profiles() == {"local"}
    services = active(default_profiles())
    assert set(services) == {"postgres", "shop", "airflow"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert "8080:8080" in services["airflow"]["ports"] and "8081:8081" in services["shop"]["ports"]
    assert services["airflow"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert airflow_commands(services["airflow"]) == [["standalone"]]
    assert environment(services["airflow"])["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


def test_the_celery_profile_runs_each_airflow_component_apart_with_two_celery_workers():
    services = active({"celery"})
    assert set(services) == {"postgres", "shop", "redis"} | CELERY_AIRFLOW
    commands = {name: airflow_commands(services[name]) for name in CELERY_AIRFLOW}
    assert commands["airflow-init"] == [["db", "migrate"]]
    assert sorted(command[0][0] for name, command in commands.items() if name != "airflow-init") == [
        "api-server",
        "celery",
        "celery",
        "dag-processor",
        "scheduler",
        "triggerer",
    ]
    assert "8080:8080" in services["airflow-api-server"]["ports"]
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on {needed}, which the profile does not run"
    # The order that works: migrated first; nothing queues or runs a task before the API server is healthy.
    assert services["airflow-api-server"]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert "healthcheck" in services["airflow-api-server"]
    for name in CELERY_AIRFLOW - {"airflow-init", "airflow-api-server"}:
        assert services[name]["depends_on"]["airflow-api-server"]["condition"] == "service_healthy", name


def test_every_celery_component_runs_the_celery_executor_with_redis_and_one_secret():
    services = active({"celery"})
    settings = [environment(services[name]) for name in CELERY_AIRFLOW]
    for env in settings:
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        assert "SYNCLANE_DECLARATION" in env and "AIRFLOW_CONN_SYNCLANE_DEFAULT" in env
    for key in (
        "AIRFLOW__CELERY__BROKER_URL",
        "AIRFLOW__CELERY__RESULT_BACKEND",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    ):
        assert len({env[key] for env in settings}) == 1, f"the components disagree on {key}"
    env = settings[0]
    broker = urlsplit(env["AIRFLOW__CELERY__BROKER_URL"])
    assert broker.scheme == "redis" and broker.hostname == "redis" and broker.port == 6379
    assert services["redis"]["image"].startswith("redis:")
    backend = urlsplit(env["AIRFLOW__CELERY__RESULT_BACKEND"])
    assert backend.scheme.startswith("db+postgresql") and (backend.hostname, backend.path) == (
        "postgres",
        "/synclane_airflow",
    )
    api = urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert (api.hostname, api.port) == ("airflow-api-server", 8080)


def test_the_two_celery_workers_stand_for_two_machines():
    services = active({"celery"})
    workers = [services[name] for name in ("airflow-worker-1", "airflow-worker-2")]
    hostnames = [worker["hostname"] for worker in workers]
    celery_names = [
        command[command.index("--celery-hostname") + 1] for worker in workers for command in airflow_commands(worker)
    ]
    assert len(set(hostnames)) == 2 and len(set(celery_names)) == 2
    # The API server fetches a worker's task logs from its host name: each resolves, being a service name.
    assert set(hostnames) <= set(services)


@pytest.fixture(scope="module")
def airflow_cli():
    from airflow.cli import cli_parser

    return cli_parser.get_parser()


def test_every_airflow_command_is_one_airflow_knows(airflow_cli):
    for name, service in compose()["services"].items():
        for command in airflow_commands(service):
            airflow_cli.parse_args(command)  # exits (fails the test) on an unknown command or option
        for module in re.findall(r"python -m ([\w.]+)", " ".join(service.get("command", []))):
            assert importlib.util.find_spec(module) is not None, f"{name} runs {module}"


def test_every_file_it_refers_to_exists():
    for name, service in compose()["services"].items():
        if "build" in service:
            context = ROOT / (service["build"] if isinstance(service["build"], str) else service["build"]["context"])
            assert (context / "Dockerfile").is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
        files = service.get("env_file", [])
        for path in [files] if isinstance(files, str) else files:
            assert (ROOT / path).is_file(), f"{name} reads {path}, which does not exist"
        for value in environment(service).values():
            if str(value).startswith(IMAGE_ROOT):
                assert (ROOT / str(value)[len(IMAGE_ROOT) :]).exists(), f"{name} names {value}, not in the image"
        if "image" in service and "build" not in service and service["image"] == "synclane-demo":
            assert any(
                other.get("image") == "synclane-demo" and "build" in other for other in active(set()).values()
            ), f"{name} uses the project's image, which no service that always runs builds"


def test_the_dockerfile_copies_only_what_exists_and_installs_the_project():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:", dockerfile, re.MULTILINE)
    copied = [
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY")
        for source in line.split()[1:-1]
        if not source.startswith("--")
    ]
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert {"pyproject.toml", "dags", *packages["packages"]} <= set(copied)  # every package the install builds
    for source in copied:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"
    assert '"/opt/synclane[celery]"' in dockerfile  # the celery profile's workers need the Celery provider
    assert "celery" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_commands_and_settings_it_uses_are_ours():
    services = compose()["services"]
    shop_command = services["shop"]["command"]
    assert shop_command[:3] == ["python", "-m", "synclane_demo.shop"]
    args = parse_shop_args(shop_command[3:])
    assert (args.host, args.port) == ("0.0.0.0", 8081)
    assert all(key.startswith("SHOP_") for key in services["shop"]["environment"])
    env = environment(services["airflow"])
    module, _, attribute = env["SYNCLANE_DECLARATION"].partition(":")
    declared = getattr(importlib.import_module(module), attribute)
    assert declared.queue(env["SYNCLANE_QUEUE"])
    settings = DemoSettings.from_env(env)
    assert settings.shop_url == "http://shop:8081" and settings.database_url.endswith("@postgres:5432/synclane")
    assert env["AIRFLOW_CONN_SYNCLANE_DEFAULT"].endswith("@postgres:5432/synclane")
    # the app's OAuth client at the shop service, a key for the owners' credentials, and each account connected
    assert json.loads(env[f"AIRFLOW_CONN_{OAUTH_CONN_ID.upper()}"]) == json.loads(oauth_connection(settings.shop_url))
    Sealer(env["AIRFLOW__SYNCLANE__CREDENTIALS_KEY"])  # a Fernet key
    for name in ("airflow", "airflow-init"):
        assert "python -m synclane_demo.connect && " in services[name]["command"][-1], name
    assert "synclane_airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert "synclane_airflow" in (ROOT / "docker/postgres-init.sql").read_text()
    json.dumps(compose())  # nothing YAML-only (dates, anchors left unresolved) in it
