"""Retries that do not stampede: after an outage with 200 jobs in flight, full jitter spreads the comeback.

Exact and repeatable: a pinned clock, one worker slot draining what is due at each 250-ms tick, and the retry
policy's seeded random (see ``tests/support/stampede.py``).
"""

from __future__ import annotations

import psycopg

from synclane_provider.core.declare.retry import Jitter
from tests.support.database import drop_schemas
from tests.support.stampede import stampede


def test_after_a_10_second_outage_the_retries_of_200_jobs_come_back_spread_not_together(database_url, fresh_schema):
    result = stampede(database_url, fresh_schema, jobs=200, jitter=Jitter.FULL, seed=13)

    assert result.completed == 200 and sum(result.first_after.values()) == 200
    # No thundering herd: no second after recovery sees more than a tenth of the jobs come back (measured: 16),
    # where a herd brings all 200 in one second (the test below).
    assert result.max_per_bucket <= 20, result.first_after
    assert result.spread_seconds >= 20  # spread over the delay window (10 s doubling), not bunched at its start
    # And the API itself, failed requests included, never sees the 200 again after the first instant.
    assert max(n for second, n in result.requests_per_second.items() if second >= 1) <= 40


def test_the_stampede_is_the_same_every_run_with_the_same_seed(database_url, fresh_schema):
    first = stampede(database_url, fresh_schema, jobs=60, jitter=Jitter.FULL, seed=5)
    again = stampede(database_url, fresh_schema + "_again", jobs=60, jitter=Jitter.FULL, seed=5)
    try:
        assert first.first_after == again.first_after and first.requests_per_second == again.requests_per_second
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            drop_schemas(conn, fresh_schema + "_again")


def test_without_jitter_the_same_outage_brings_every_job_back_in_the_same_second(database_url, fresh_schema):
    result = stampede(database_url, fresh_schema, jobs=200, jitter=Jitter.NONE)

    assert result.completed == 200
    assert result.first_after == {0: 200}  # the herd the measurement above would catch
