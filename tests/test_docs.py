"""The Python blocks of the README and of docs/reference.md run as written, and leave no connection open.

Each document's blocks run in order in one namespace, against a database of their own (the documents'
address ``postgresql://postgres@127.0.0.1:5432/postgres`` is pointed at it), which is dropped afterwards.
Names a document treats as the reader's own code (the README's ``shop_api`` and ``store``, the window
``start``/``end`` of a hand job) are given stand-ins.
"""

from __future__ import annotations

import re
import types
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.airflow_env import REPO
from tests.support.helpers import connections_open

DOCUMENTED_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(document: str) -> list[str]:
    return BLOCK.findall((REPO / document).read_text(encoding="utf-8"))


class StandInShop:
    """The README's ``shop_api``: two pages of orders per window, one page of products."""

    def orders(self, owner, *, since, until, cursor):
        offset = int(cursor or 0)
        return types.SimpleNamespace(
            status=200,
            headers={},
            orders=[f"{owner}-{offset + n}" for n in range(10)],
            next_cursor=None if offset else "10",
        )

    def products(self, owner, *, cursor):
        return types.SimpleNamespace(products=["p1", "p2"], next_cursor=None)


class StandInStore:
    def upsert_orders(self, orders):
        pass

    def upsert_products(self, products):
        pass


@pytest.fixture
def docs_database(database_url: str, admin) -> Iterator[str]:
    """A database of its own for one document's blocks; afterwards no connection to it may be left open."""
    name = f"synclane_docs_{uuid.uuid4().hex[:10]}"
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(database_url, dbname=name)
        assert connections_open(admin, database=name) == [], "the documented code left connections open"
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def run_blocks(document: str, url: str, **stand_ins: object) -> dict:
    namespace: dict = {"__name__": f"docs:{document}", **stand_ins}
    blocks = python_blocks(document)
    assert blocks, f"{document} has no python blocks"
    for number, block in enumerate(blocks, 1):
        code = block.replace(DOCUMENTED_URL, url)
        try:
            exec(compile(code, f"{document} python block {number}", "exec"), namespace)  # noqa: S102 - our docs
        except Exception as exc:
            raise AssertionError(f"{document}, python block {number} failed: {exc!r}\n{block}") from exc
    return namespace


def test_every_block_of_the_reference_runs(docs_database):
    namespace = run_blocks("docs/reference.md", docs_database)
    assert namespace["seen"], "the handlers ran"


def test_every_block_of_the_readme_runs(docs_database):
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    run_blocks(
        "README.md",
        docs_database,
        shop_api=StandInShop(),
        store=StandInStore(),
        start=start,
        end=start + timedelta(days=1),
    )


def test_the_documents_use_the_address_the_test_points_elsewhere():
    for document in ("README.md", "docs/reference.md"):
        urls = set(re.findall(r"postgresql://[^\"'\s)]+", "\n".join(python_blocks(document))))
        assert urls <= {DOCUMENTED_URL}, f"{document} connects somewhere the test does not redirect: {urls}"


def test_a_failing_block_is_reported_with_its_document_and_number(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_docs.REPO", tmp_path)
    (tmp_path / "broken.md").write_text("```python\nx = 1\n```\n\n```python\nassert x == 2\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="broken.md, python block 2 failed"):
        run_blocks("broken.md", "postgresql://unused")
