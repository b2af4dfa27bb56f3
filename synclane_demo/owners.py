"""The owner source: who is connected is a row in ``demo.accounts``, so SQL connects and disconnects accounts.

    UPDATE demo.accounts SET connected = false WHERE id = 'initech';   -- planned no more
    INSERT INTO demo.accounts (id) VALUES ('hooli');                   -- planned on the next pass

The planner asks once per pass; nothing is cached, so a change is seen within a minute. Each owner carries its
lane's rate budget (the shop's limit for its seller, from the demo's settings): workers read it from here too.
"""

from __future__ import annotations

from collections.abc import Mapping

from synclane_demo.store import Store
from synclane_provider.core import Owner, Rate


class ConnectedAccounts:
    """Lists the connected accounts of the demo's ``accounts`` table as owners, with their lanes."""

    def __init__(self, store: Store, rates: Mapping[str, Rate] | None = None) -> None:
        self._store = store
        self._rates = dict(rates or {})

    def __call__(self, queue: str) -> list[Owner]:
        return [
            Owner(account, lane, rate=self._rates.get(lane or account))
            for account, lane in self._store.connected_accounts()
        ]
