"""Landing a handler's records in a destination table: the declaration apart from the code that lands a page.

Lives here: ``spec`` (DestinationSpec: a destination table as declared, frozen and checked), ``destination``
(Destination: landing one page, in one statement, through the page's context), ``page_rows`` (a page's rows
checked, one per key, and its values as they are sent), ``page_statements`` (the statements of ``landing.sql``
composed for a table and a page's columns) and ``landing.sql`` (every statement landing sends).

May import: the vocabulary at the top of ``core`` (a page's context among it), ``db`` (the statement loader) and
psycopg; nothing from ``declare``, ``plan``, ``run`` or ``ops``, and nothing in ``db`` imports it.
"""
