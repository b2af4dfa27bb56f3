"""SyncLane for Airflow: sync jobs with windows, cursors and exclusive lanes in one PostgreSQL table."""

from __future__ import annotations

__version__ = "0.1.0"

_INTEGRATION = "SyncLane"


def get_provider_info() -> dict:
    """Describe the provider to Airflow (entry point ``apache_airflow_provider``).

    Only names are listed here: Airflow imports the modules when it needs them,
    so registering the provider costs nothing at start-up.
    """
    return {
        "package-name": "airflow-provider-synclane",
        "name": "SyncLane",
        "description": __doc__,
        "versions": [__version__],
        "integrations": [{"integration-name": _INTEGRATION, "tags": ["software"]}],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": ["synclane_provider.hooks.synclane"]}],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "synclane_provider.operators.plan",
                    "synclane_provider.operators.work",
                    "synclane_provider.operators.assets",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["synclane_provider.sensors.initial_load", "synclane_provider.sensors.drained"],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "synclane_provider.triggers.due",
                    "synclane_provider.triggers.initial_load",
                    "synclane_provider.triggers.drained",
                    "synclane_provider.triggers.initial_loads",
                ],
            }
        ],
        "asset-uris": [{"schemes": ["synclane"], "handler": "synclane_provider.assets.sanitize_uri"}],
        "connection-types": [
            {
                "connection-type": "synclane",
                "hook-class-name": "synclane_provider.hooks.synclane.SyncLaneHook",
                "hook-name": "SyncLane",
            }
        ],
    }
