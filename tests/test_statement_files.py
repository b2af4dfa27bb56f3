"""The statement files: each statement under its name, and a part several statements share written once."""

from __future__ import annotations

import pytest

from synclane_provider.core.db import queries
from synclane_provider.core.db.queries import named_statements


def test_a_shared_fragment_stands_whole_in_every_statement_that_names_it():
    finish_and_take = queries._texts()["finish_and_take"]
    worker_wakeup = queries._texts()["worker_wakeup"]
    for text in (finish_and_take, worker_wakeup):
        assert "{lanes_with_waiting_work}" not in text and "FROM lanes WHERE lanes.lane IS NOT NULL" in text
    assert "{free_slots_of_j}" not in finish_and_take
    assert finish_and_take.count("FROM generate_series(0, j.lane_width - 1) AS slot(n)") == 2


def test_every_statement_is_composed_and_no_fragment_is_left_unused():
    for source in ("queries.sql", "monitor.sql", "schema_versions.sql"):
        for name in queries._texts(source):
            assert queries.statement(name, "synclane", source).text  # every {…} but {schema} is a fragment in place


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n", "names 'a' twice"),
        ("-- fragment: part\nx\n-- name: a\nSELECT {part};\n-- fragment: part\ny\n", "names 'part' twice"),
        ("-- fragment: unused\nx\n-- name: a\nSELECT 1;\n", "defines the fragment 'unused' but no statement uses it"),
    ],
)
def test_a_name_given_twice_or_a_fragment_never_used_is_refused(tmp_path, monkeypatch, text, complaint):
    name = f"statements_{tmp_path.name}"  # a package of its own for each case: imports are cached by name
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probe.sql").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match=complaint):
        named_statements(name, "probe.sql")
