"""The database: sessions, the statement loader, the typed store, the async watch, transient-error handling.

Lives here: ``database`` (connections and sessions), ``queries`` (the loader for the named statements of the
``.sql`` files beside it), ``store`` (the typed statements of the jobs table), ``watch`` (LISTEN for
triggers), ``wakeups`` (NOTIFY channels and advisory-lock keys), ``transient`` (which errors pass),
``schema_versions`` with ``migrations/`` (the migration engine and its numbered files) and ``schema`` (its
command line), ``landing`` (declaring a destination table and landing a handler's records in it), with
``page_rows`` (a page's rows checked, one per key, and its values as they are sent), ``page_statements`` (the
statements of ``landing.sql`` composed for a table and a page's columns) and ``page_transaction`` (a page's rows
and its job's cursor committed in one transaction of the jobs database). Every statement the engine
sends is in ``queries.sql``, ``monitor.sql``, ``schema_versions.sql`` or ``landing.sql`` here.

May import: the vocabulary at the top of ``core`` (errors, states, records, page_context, clock, durations, metrics) and
psycopg; nothing from ``declare``, ``plan``, ``run`` or ``ops``.
"""
