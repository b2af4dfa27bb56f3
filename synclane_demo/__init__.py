"""The SyncLane demo: a pretend shop API, and a sync of its five accounts written the way users write theirs.

* :mod:`synclane_demo.shop` is the other side: a small HTTP service that pages
  slowly, sometimes says 429 or 503, and has one broken page until it heals.
* :mod:`synclane_demo.sync` is our side: the queue declaration Airflow loads by
  import path, with handlers that store orders and products with upserts and an
  owner source that reads the connected accounts from a table.

Nothing here is part of the provider; it only uses its public API.
"""
