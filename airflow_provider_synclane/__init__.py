"""The module Airflow looks in for this distribution's example DAGs: none (the provider is ``synclane_provider``).

Airflow 3.3, with ``[core] load_examples`` on (a fresh ``AIRFLOW_HOME``'s default), imports each provider's module
by its distribution's name (``airflow-provider-synclane`` becomes ``airflow_provider_synclane``) to look for an
``example_dags`` folder in it, and logs an error with a traceback in every ``airflow`` command when there is no
such module. This one answers that import: it has no ``example_dags``, so nothing is loaded from it. SyncLane's
example DAGs are files to copy into a DAG folder (``dags/`` in the repository), as docs/tutorials/first-sync.md says.
"""
