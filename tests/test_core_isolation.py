"""The engine stands alone: importing it pulls in nothing from Airflow."""

from __future__ import annotations

import subprocess
import sys


def test_engine_imports_nothing_from_airflow():
    probe = (
        "import sys, synclane_provider.core, synclane_provider.core.run.worker, synclane_provider.core.ops.operations\n"
        "leaked = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "print(','.join(leaked))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_the_states_are_used_without_importing_the_worker_or_psycopg():
    probe = (
        "import sys\n"
        "from synclane_provider.core.states import JobStatus\n"
        "from synclane_provider.core import JobMode\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg' or m.startswith('synclane_provider.core.run'))\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
