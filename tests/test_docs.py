"""The docs: the site builds without a warning, every code block runs or says why not, and the hand-written
references name what the code has.

A page's ``python`` blocks run in order in one namespace (after those of the page it continues, see ``PAGES``),
against a database of their own (the documents' address ``postgresql://postgres@127.0.0.1:5432/postgres`` is
pointed at it), which is dropped afterwards; no connection may be left open. Names a page treats as the reader's
own code (``shop_api`` and ``store``, the window ``start``/``end`` of a hand job) are given stand-ins.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import shutil
import subprocess
import sys
import types
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.airflow_env import REPO
from tests.support.helpers import connections_open

DOCUMENTED_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$", re.MULTILINE)

DECLARE = "docs/how-to/declare.md"
FIRST_SYNC = "docs/tutorials/first-sync.md"
JOBS_FROM_CODE = "docs/how-to/jobs-from-code.md"
PAGES: dict[str, tuple[str, ...]] = {
    "README.md": (),
    "docs/reference.md": (),
    "docs/reference/provider.md": (),
    "docs/tutorials/first-sync.md": (),
    DECLARE: (),
    "docs/how-to/land-records.md": (DECLARE,),
    "docs/how-to/lanes-and-rates.md": (DECLARE,),
    JOBS_FROM_CODE: (DECLARE,),
    "docs/how-to/resync.md": (DECLARE, JOBS_FROM_CODE),
    "docs/how-to/retention.md": (),
    "docs/how-to/credentials.md": (),
}
"""Each page whose python blocks run, and the pages it continues (their blocks run first, in that order)."""

MARKS = ("excerpt", "output")
RUN_BY = "run-by:"


def documents() -> list[str]:
    """Every Markdown document a reader meets: the README, the changelog, CONTRIBUTING and the site's pages."""
    pages = sorted(str(path.relative_to(REPO)) for path in (REPO / "docs").rglob("*.md") if "_build" not in path.parts)
    return [name for name in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md") if (REPO / name).exists()] + pages


def python_blocks(document: str) -> list[str]:
    return BLOCK.findall((REPO / document).read_text(encoding="utf-8"))


def fences(text: str) -> Iterator[tuple[int, str]]:
    """The info string of each code block's opening fence, with its line number (directives, ```{name}, left out)."""
    open_fence: str | None = None
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if open_fence is None:
            open_fence = match["fence"]
            info = match["info"].strip()
            if not info.startswith("{"):
                yield line, info
        elif (
            match["fence"].startswith(open_fence[0])
            and len(match["fence"]) >= len(open_fence)
            and not match["info"].strip()
        ):
            open_fence = None


class StandInShop:
    """The reader's ``shop_api``: two pages of orders per window, one page of products."""

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


def stand_ins() -> dict:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return {"shop_api": StandInShop(), "store": StandInStore(), "start": start, "end": start + timedelta(days=1)}


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


def run_blocks(document: str, url: str, namespace: dict | None = None, **stand_ins: object) -> dict:
    namespace = {"__name__": f"docs:{document}", **(namespace or {}), **stand_ins}
    blocks = python_blocks(document)
    assert blocks, f"{document} has no python blocks"
    for number, block in enumerate(blocks, 1):
        code = block.replace(DOCUMENTED_URL, url)
        try:
            exec(compile(code, f"{document} python block {number}", "exec"), namespace)  # noqa: S102 - our docs
        except Exception as exc:
            raise AssertionError(f"{document}, python block {number} failed: {exc!r}\n{block}") from exc
    return namespace


@pytest.mark.parametrize("document", sorted(PAGES))
def test_every_python_block_of_the_page_runs(document, docs_database):
    namespace = stand_ins()
    for earlier in PAGES[document]:
        namespace = run_blocks(earlier, docs_database, namespace)
    namespace = run_blocks(document, docs_database, namespace)
    if document == "docs/reference.md":
        assert namespace["seen"], "the handlers ran"


def test_every_page_with_python_blocks_runs_them():
    """A page's python blocks run in the tests unless it has none: a new page with one must be listed in PAGES."""
    assert {document for document in documents() if python_blocks(document)} == set(PAGES)


def test_every_other_block_says_why_it_does_not_run():
    """A code block that is not ``python`` carries a mark after its language: ``excerpt``, ``output`` or
    ``run-by:<a test file>``, and that test file exists; so does a ``python`` block with a mark."""
    unmarked = []
    for document in documents():
        for line, info in fences((REPO / document).read_text(encoding="utf-8")):
            language, _, mark = info.partition(" ")
            mark = mark.strip()
            if language == "python" and not mark:
                continue
            known = mark in MARKS or (mark.startswith(RUN_BY) and (REPO / mark[len(RUN_BY) :]).is_file())
            if not language or not known:
                unmarked.append(f"{document}:{line}: ```{info}")
    assert unmarked == [], "code blocks that neither run nor say why:\n" + "\n".join(unmarked)


def test_the_documents_use_the_address_the_test_points_elsewhere():
    for document in PAGES:
        urls = set(re.findall(r"postgresql://[^\"'\s)]+", "\n".join(python_blocks(document))))
        assert urls <= {DOCUMENTED_URL}, f"{document} connects somewhere the test does not redirect: {urls}"


def test_a_failing_block_is_reported_with_its_document_and_number(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_docs.REPO", tmp_path)
    (tmp_path / "broken.md").write_text("```python\nx = 1\n```\n\n```python\nassert x == 2\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="broken.md, python block 2 failed"):
        run_blocks("broken.md", "postgresql://unused")


def test_a_block_without_a_mark_is_found(tmp_path, monkeypatch):
    text = "```bash excerpt\nls\n```\n\n````text\n```bash\nnested\n```\n````\n\n```sql\nselect 1\n```\n"
    assert list(fences(text)) == [(1, "bash excerpt"), (5, "text"), (11, "sql")]


# -- the site ------------------------------------------------------------------------------------------------


def build_site(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``scripts/docs`` as the tests run it: Sphinx with every warning an error, in a process of its own."""
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(source), str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_the_site_builds_without_a_warning(tmp_path):
    """A broken link, a link to a section that is gone, a page missing from the contents, a docstring Sphinx
    cannot read or a name the reference no longer finds fails the build, and so this test."""
    built = build_site(REPO / "docs", tmp_path / "html")
    assert built.returncode == 0, f"the docs site has warnings:\n{built.stderr}"
    assert (tmp_path / "html" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path):
    """The build the test above runs does fail on a warning: a page with a link to a page that does not exist."""
    shutil.copy(REPO / "docs" / "conf.py", tmp_path / "conf.py")
    shutil.copytree(REPO / "docs" / "_ext", tmp_path / "_ext")
    (tmp_path / "index.md").write_text("# Home\n\nSee [the guide](missing-guide.md).\n", encoding="utf-8")
    built = build_site(tmp_path, tmp_path / "html")
    assert built.returncode != 0 and "missing-guide.md" in built.stderr, built.stderr


# -- the hand-written references, against the code ------------------------------------------------------------


def section(document: str, heading: str) -> str:
    text = "\n" + (REPO / document).read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_reference_names_every_public_method_of_operations():
    from synclane_provider.core import Operations

    documented = set(re.findall(r"\*\*`(\w+)\(", section("docs/reference.md", "## Operations")))
    public = {name for name, _ in inspect.getmembers(Operations, inspect.isfunction) if not name.startswith("_")}
    assert public - documented == set(), "Operations methods docs/reference.md does not describe"
    assert documented - public == set(), "docs/reference.md describes Operations methods that do not exist"


def test_the_declaration_api_page_documents_every_public_name():
    import synclane_provider.core as core

    page = (REPO / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^```\{auto\w+\} synclane_provider\.core\.(\w+)$", page, re.MULTILINE))
    assert documented == set(core.__all__)


def synclane_commands() -> dict[str, set[str]]:
    """``airflow synclane``'s commands and each one's options, from the parser Airflow builds of them."""
    from airflow.cli.cli_parser import _add_command

    from synclane_provider.cli.definition import get_synclane_cli_commands

    parser = argparse.ArgumentParser(prog="airflow")
    _add_command(parser.add_subparsers(), *get_synclane_cli_commands())
    [group] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    [commands] = [a for a in group.choices["synclane"]._actions if isinstance(a, argparse._SubParsersAction)]
    common = {"--conn-id", "--declaration", "--output", "--verbose", "--queue", "--help"}
    return {
        name: {max(action.option_strings, key=len) for action in command._actions if action.option_strings} - common
        for name, command in commands.choices.items()
    }


def test_the_first_sync_tutorial_names_every_command():
    """The tutorial's list of ``airflow synclane`` commands is the parser's, so a reader learns of each one."""
    listed = re.search(r"`airflow synclane ((?:[a-z]+\|)+[a-z]+)`", (REPO / FIRST_SYNC).read_text(encoding="utf-8"))
    assert listed, f"{FIRST_SYNC} lists no airflow synclane commands"
    assert set(listed[1].split("|")) == set(synclane_commands())


def test_the_first_sync_tutorial_query_runs_on_the_jobs_table(docs_database):
    """The tutorial's ``SELECT`` names the schema and columns the migrations make (its declaration's
    connection creates the table), so a column renamed or misspelt fails here, not in a reader's terminal."""
    [query] = re.findall(r"^```sql run-by:tests/test_docs.py\n(.*?)^```", (REPO / FIRST_SYNC).read_text(), re.S | re.M)
    synclane = run_blocks(FIRST_SYNC, docs_database)["synclane"]
    with synclane.database(docs_database) as database, database.connect() as conn:
        columns = [column.name for column in conn.execute(query).description or ()]
    assert {"id", "owner", "type", "status"} <= set(columns)


def test_the_operating_guide_lists_every_command_with_its_options():
    """docs/operating.md's command table has a row for each ``airflow synclane`` command, naming each of its
    options (those every command takes are said once above the table), and no option the command lacks."""
    rows = {
        match[1]: set(re.findall(r"(--[a-z][a-z-]*)", match[2]))
        for match in re.finditer(
            r"^\| `airflow synclane (\w+)([^`]*)` \|", section("docs/operating.md", "## `airflow synclane`"), re.M
        )
    }
    assert rows == synclane_commands()


def test_the_configuration_the_guides_show_is_the_providers():
    """Every ``[synclane]`` option an ``ini`` block of the docs sets is one the provider declares."""
    from synclane_provider import get_provider_info

    declared = set(get_provider_info()["config"]["synclane"]["options"])
    for document in documents():
        text = (REPO / document).read_text(encoding="utf-8")
        for block in re.findall(r"^```ini[^\n]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
            if block.startswith("[synclane]"):
                options = {line.split("=")[0].strip() for line in block.splitlines()[1:] if "=" in line}
                assert options <= declared, f"{document} sets [synclane] options the provider lacks"


def test_the_operator_table_names_each_class_and_parameter_that_exists():
    """docs/reference/provider.md's summary table: each class is importable and takes the parameters it shows."""
    table = section("docs/reference/provider.md", "# Operators, sensors, triggers and the hook")
    rows = re.findall(r"^\| `(synclane_provider\.[\w.]+)\.(\w+)\(([^`]*)\)` \|", table, re.MULTILINE)
    assert len(rows) == 5
    for module, name, shown in rows:
        cls = getattr(importlib.import_module(module), name)
        accepted = set()
        for klass in cls.__mro__:
            if "__init__" in vars(klass):
                accepted |= set(inspect.signature(klass.__init__).parameters)
        parameters = {part.split("=")[0].strip() for part in shown.split(",")}
        assert parameters <= accepted, f"{name} does not take {parameters - accepted}"
