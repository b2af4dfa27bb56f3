"""A credential a handler logs by mistake shows as ``***`` in the worker's log, through real loggers."""

from __future__ import annotations

import io
import logging

import pytest
from cryptography.fernet import Fernet

from synclane_provider.core import Operations, Page, WorkerSlot
from synclane_provider.core.credentials import Credentials, Sealer
from synclane_provider.core.page_context import PageJob
from synclane_provider.core.redact import remember_secret
from synclane_provider.core.run.log_redaction import REDACTING_FILTER, redact_logs
from synclane_provider.core.run.tokens import TokenSource
from tests.support.helpers import declare, owners, products

KEY = Fernet.generate_key().decode()


@pytest.fixture
def written():
    """What the root logger's handlers write, with every filter put on them taken off again afterwards."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    yield stream
    root.removeHandler(handler)
    for logger in (root, *[logging.getLogger(name) for name in ("tests.worker", "synclane_provider.core.run.worker")]):
        logger.removeFilter(REDACTING_FILTER)
        for each in logger.handlers:
            each.removeFilter(REDACTING_FILTER)


def test_a_secret_logged_by_any_logger_below_the_worker_s_is_written_as_stars(written):
    remember_secret("at_kept-secret-123")
    worker = logging.getLogger("tests.worker")
    redact_logs(worker)
    shop = logging.getLogger("a_handler_s_own.client")
    shop.setLevel(logging.INFO)
    shop.info(f"GET /orders with token at_kept-secret-123 (page {2})")
    shop.info("retrying with %s", "at_kept-secret-123")
    shop.info("headers: Authorization: Bearer abcdef.ghijkl.mnop")
    try:
        raise PermissionError("401 for https://api.example.com/orders?api_key=sk_live_abcdef")
    except PermissionError:
        shop.exception("the shop refused")
    log = written.getvalue()
    assert "GET /orders with token *** (page 2)" in log and "retrying with ***" in log
    assert "Authorization: Bearer ***" in log and "api_key=***" in log
    assert "at_kept-secret-123" not in log and "abcdef.ghijkl" not in log and "sk_live_abcdef" not in log


def test_beside_a_structlog_logger_as_airflow_gives_a_task_the_root_logger_is_redacted(written):
    structlog = pytest.importorskip("structlog")
    remember_secret("at_structlog-case-456")
    redact_logs(structlog.get_logger("airflow.task"))
    logging.getLogger("a_handler_s_own.client").warning("token at_structlog-case-456")
    assert "token ***" in written.getvalue() and "at_structlog-case-456" not in written.getvalue()


def test_redacting_twice_installs_one_filter(written):
    redact_logs(logging.getLogger("tests.worker"))
    redact_logs(logging.LoggerAdapter(logging.getLogger("tests.worker")))
    assert logging.getLogger("tests.worker").filters.count(REDACTING_FILTER) == 1
    assert logging.getLogger().filters.count(REDACTING_FILTER) == 1


def test_a_worker_redacts_the_credential_its_handler_logs(written, schema, database_url, clock):
    def handler(job: PageJob) -> Page:
        logging.getLogger("shop.client").warning(f"calling the shop with key {job.credentials()}")
        return Page(None, 1)

    declaration = declare(schema, products(handler), owner_source=owners("acme"))
    database = declaration.database(database_url)
    tokens = TokenSource(database, Sealer(KEY), None)
    with Operations(declaration, database, sealer=Sealer(KEY)) as ops:
        ops.set_credentials("shops", "acme", Credentials("api_key", api_key="sk_live_acme_98765"))
        ops.plan("shops", now=clock.now)
        with WorkerSlot(declaration, database, "shops", clock=clock, tokens=tokens) as slot:
            slot.drain()
    tokens.close()
    log = written.getvalue()
    assert "calling the shop with key ***" in log and "sk_live_acme_98765" not in log
