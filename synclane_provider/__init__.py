"""SyncLane for Airflow: sync jobs with windows, cursors and exclusive lanes in one PostgreSQL table."""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Describe the provider to Airflow (entry point ``apache_airflow_provider``)."""
    return {
        "package-name": "airflow-provider-synclane",
        "name": "SyncLane",
        "description": __doc__,
        "versions": [__version__],
    }
