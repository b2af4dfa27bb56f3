"""Finding a Redis for the Celery test: a database of its own on a shared server, else a server of its own."""

from __future__ import annotations

import shutil

import pytest
import redis

from tests.support import celery_cluster as cluster
from tests.support.celery_cluster import CLAIM_KEY, RedisUnavailable, find_redis
from tests.support.real_airflow import free_port


def _reachable(url: str) -> bool:
    return cluster._unreachable(url) is None


@pytest.fixture
def no_named_redis(monkeypatch):
    monkeypatch.delenv("SYNCLANE_TEST_REDIS_URL", raising=False)


def test_two_users_of_a_shared_server_get_databases_of_their_own_emptied_afterwards(no_named_redis, tmp_path):
    if not _reachable(cluster.LOCAL_REDIS):
        pytest.skip(f"no Redis at {cluster.LOCAL_REDIS}")  # the next test covers starting one
    first, second = find_redis(tmp_path), find_redis(tmp_path)
    try:
        assert first.server is None and first.url != second.url
        with redis.Redis.from_url(first.url) as client:
            assert client.get(CLAIM_KEY) is not None
            client.set("left-behind", "1")
    finally:
        first.close()
        second.close()
    with redis.Redis.from_url(first.url) as client:
        assert client.dbsize() == 0


def test_without_a_reachable_server_it_starts_redis_server_and_stops_it(no_named_redis, monkeypatch, tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server binary")
    monkeypatch.setattr(cluster, "LOCAL_REDIS", f"redis://127.0.0.1:{free_port()}")
    found = find_redis(tmp_path)
    try:
        assert found.server is not None and found.server.running and _reachable(found.url)
    finally:
        found.close()
    assert not found.server.running and not _reachable(found.url)


def test_with_neither_it_says_what_is_missing(no_named_redis, monkeypatch, tmp_path):
    monkeypatch.setattr(cluster, "LOCAL_REDIS", f"redis://127.0.0.1:{free_port()}")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RedisUnavailable, match="no redis-server to start"):
        find_redis(tmp_path)


def test_a_named_redis_that_is_not_reachable_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SYNCLANE_TEST_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(RedisUnavailable, match="SYNCLANE_TEST_REDIS_URL"):
        find_redis(tmp_path)
