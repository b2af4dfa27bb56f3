"""The database: sessions, the statement loader, the typed store, the async watch, transient-error handling.

Lives here: ``database`` (connections and sessions), ``queries`` (the loader for the named statements of the
``.sql`` files beside it), ``store`` (the typed statements of the jobs table), ``watch`` (LISTEN for
triggers), ``wakeups`` (NOTIFY channels and advisory-lock keys), ``transient`` (which errors pass),
``schema_versions`` with ``migrations/`` (the migration engine and its numbered files) and ``schema`` (its
command line), and ``page_transaction`` (a worker's transaction in which a page's rows and its job's cursor
commit together). Every statement about the jobs table is in ``queries.sql``, ``monitor.sql`` or
``schema_versions.sql`` here; landing a handler's records is ``land``'s (its statements in ``landing.sql``).

May import: the vocabulary at the top of ``core`` (errors, states, records, page_context, clock, durations, metrics) and
psycopg; nothing from ``declare``, ``plan``, ``run`` or ``ops``.
"""
