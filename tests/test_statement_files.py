"""The statement files: each statement under its name, and a part several statements share written once."""

from __future__ import annotations

from importlib import resources

import pytest

from synclane_provider.core.db import queries
from synclane_provider.core.db.queries import named_statements

PACKAGE = "synclane_provider.core.db"


def test_a_shared_fragment_stands_whole_in_every_statement_that_names_it():
    finish_and_take = queries._texts()["finish_and_take"]
    take_many = queries._texts()["take_many"]
    worker_wakeup = queries._texts()["worker_wakeup"]
    for text in (finish_and_take, take_many, worker_wakeup):
        assert "{lanes_with_waiting_work}" not in text and "FROM lanes WHERE lanes.lane IS NOT NULL" in text
    for text in (finish_and_take, take_many):
        assert "{free_slots_of_j}" not in text
        assert text.count("FROM generate_series(0, j.lane_width - 1) AS slot(n)") == 2


def test_freshness_is_one_rule_written_once_and_read_by_every_statement_that_reads_it():
    """The rule of which jobs count for an owner's freshness is written once, in queries.sql, and stands whole in
    the freshness, lag, prune and owners view statements: the last in monitor.sql, which borrows it."""
    rule = queries.fragments_of(PACKAGE, "queries.sql")["j_counts_for_freshness"].splitlines()[-1]
    written = [resources.files(PACKAGE).joinpath(source).read_text() for source in ("queries.sql", "monitor.sql")]
    assert [text.count(rule) for text in written] == [1, 0]
    readers = {("queries.sql", "freshness"): 1, ("queries.sql", "window_lags"): 1, ("queries.sql", "prune"): 2}
    for (source, name), times in {**readers, ("monitor.sql", "owners"): 1}.items():
        assert queries._texts(source)[name].count(rule) == times, name


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
        ("-- fragment: own\nx\n-- name: a\nSELECT {own};\n", "names 'own' twice: a fragment of its own, and one it"),
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
        named_statements(name, "probe.sql", borrowed={"own": "y"})


def test_a_fragment_may_name_another_and_a_file_may_borrow_another_files_fragments(tmp_path, monkeypatch):
    name = f"statements_{tmp_path.name}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probe.sql").write_text(
        "-- fragment: inner\n-- why\nb = 1\n-- fragment: outer\na = 1 AND {inner} AND {lent}\n"
        "-- name: one\nSELECT 1 WHERE {outer};\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    composed = named_statements(name, "probe.sql", borrowed={"lent": "c = 1"})
    assert composed == {"one": "SELECT 1 WHERE a = 1 AND -- why\nb = 1 AND c = 1"}
