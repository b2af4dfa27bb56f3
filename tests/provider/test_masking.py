"""Airflow's secrets masker and the engine's redaction know the same secrets once the hook builds a database."""

from __future__ import annotations

import dataclasses

import pytest
from airflow.sdk._shared.secrets_masker import redact as airflow_redact
from airflow.sdk.log import mask_secret

from synclane_provider.core.redact import redact, remember_secret
from synclane_provider.hooks.synclane import SyncLaneHook
from tests.support import operate_declaration

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def joined() -> None:
    SyncLaneHook().get_database(dataclasses.replace(operate_declaration.synclane))  # opens nothing


def test_what_airflow_masks_is_taken_out_of_what_the_engine_stores(joined):
    mask_secret("conn-password-airflow-masks-8812")
    assert redact("connect failed: conn-password-airflow-masks-8812 refused") == "connect failed: *** refused"


def test_a_credential_the_engine_remembers_is_masked_in_airflows_logs(joined):
    remember_secret("owner-credential-engine-knows-3307")
    assert airflow_redact("page failed for owner-credential-engine-knows-3307") == "page failed for ***"
