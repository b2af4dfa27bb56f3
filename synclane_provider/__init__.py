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
                    "synclane_provider.operators.asset_events",
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
                    "synclane_provider.triggers.initial_load_watcher",
                ],
            }
        ],
        "asset-uris": [{"schemes": ["synclane"], "handler": "synclane_provider.assets.sanitize_uri"}],
        "cli": ["synclane_provider.cli.definition.get_synclane_cli_commands"],
        "config": {
            "synclane": {
                "description": "What the SyncLane page and the ``airflow synclane`` commands work on.\n",
                "options": {
                    "declaration": {
                        "description": "The import path of your SyncLane declaration, ``package.module:attribute``.\n"
                        "When unset, ``$SYNCLANE_DECLARATION`` (what the example DAGs read).\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "my_sync.declaration:synclane",
                        "default": None,
                    },
                    "queue": {
                        "description": "The queue the example DAGs (plan, work, requeue, health, downstream) work.\n"
                        "When unset, ``$SYNCLANE_QUEUE``.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "shops",
                        "default": None,
                    },
                    "conn_id": {
                        "description": "The Airflow connection to the database holding the jobs table.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "synclane_default",
                    },
                    "credentials_key": {
                        "description": "The Fernet key owners' credentials are encrypted with in the jobs database\n"
                        "(several, comma-separated and newest first, while a key is rotated). When unset, Airflow's\n"
                        "``[core] fernet_key``.\n",
                        "version_added": "0.2.0",
                        "type": "string",
                        "sensitive": True,
                        "example": None,
                        "default": None,
                    },
                },
            }
        },
        "connection-types": [
            {
                "connection-type": "synclane",
                "hook-class-name": "synclane_provider.hooks.synclane.SyncLaneHook",
                "hook-name": "SyncLane",
            }
        ],
    }
