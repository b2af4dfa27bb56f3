"""Airflow's environment for the test session, set before anything imports ``airflow``.

Airflow reads its configuration once, at import, so this module is imported
first thing by ``conftest.py``: a throwaway ``AIRFLOW_HOME`` with an SQLite
metadata database, our ``dags/`` folder, no example DAGs, and the
``synclane_default`` connection pointing at the test PostgreSQL (given as a
URL, so it is a plain ``postgres`` connection). The provider tests work in a
schema of their own, named here so that their declaration can read it.

Migrating a fresh metadata database takes seconds to half a minute, so a
migrated copy is kept per Airflow version under ``.pytest_cache`` and copied
in here, before Airflow opens the file.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
import uuid
from contextlib import closing
from importlib.metadata import version
from pathlib import Path

from tests.support.database import DATABASE_URL

REPO = Path(__file__).resolve().parents[2]

HOME = Path(tempfile.mkdtemp(prefix="synclane-airflow-home-"))
atexit.register(shutil.rmtree, HOME, ignore_errors=True)
METADATA_DB = HOME / "airflow.db"
MIGRATED_COPY = REPO / ".pytest_cache" / "synclane" / f"airflow-{version('apache-airflow')}-metadata.db"
if MIGRATED_COPY.exists():
    shutil.copyfile(MIGRATED_COPY, METADATA_DB)
PROVIDER_SCHEMA = f"synclane_af_{uuid.uuid4().hex[:10]}"

os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{METADATA_DB}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW_CONN_SYNCLANE_DEFAULT": DATABASE_URL,
        # The example DAGs work the test declaration (tests/support/provider_declaration.py) in the test schema.
        "SYNCLANE_DECLARATION": "tests.support.provider_declaration:synclane",
        "SYNCLANE_QUEUE": "shops",
        "SYNCLANE_TEST_SCHEMA": PROVIDER_SCHEMA,
    }
)


def backup(source: Path, target: Path) -> None:
    """A whole copy of an SQLite database: SQLite's backup API, not a file copy, as Airflow runs SQLite in WAL
    mode (recent pages sit in the -wal file)."""
    with closing(sqlite3.connect(source)) as read, closing(sqlite3.connect(target)) as write:
        read.backup(write)


def copy_migrated_metadata(target: Path) -> None:
    """A migrated Airflow metadata database at ``target``, copied from the one the session migrated (the
    ``airflow_db`` fixture): what ``airflow db migrate`` would make, without the half minute it takes."""
    assert MIGRATED_COPY.exists(), "ask for the airflow_db fixture before copying its database"
    backup(MIGRATED_COPY, target)
