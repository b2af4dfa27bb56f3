"""The engine's folders are layers: a module imports from its own layer or the ones below it, never from above.

From the bottom: the vocabulary at the top of ``core`` (errors, states, records, page_context, clock, durations, metrics),
then ``db``, ``declare`` and ``land`` side by side, ``plan``, ``run``, ``ops``. ``plan`` and ``run`` do not import
each other; only ``ops`` brings them together. Nothing in ``db`` imports ``land``. Each folder's ``__init__`` docstring says the same in words.

A job crosses the layers as a row and nothing more: its fields are the jobs table's columns, of a row's kinds of
value, and nothing in the engine puts an attribute on it; a handler's job adds only its page's context.
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from datetime import datetime
from pathlib import Path

import pytest

import synclane_provider.core
from synclane_provider.core import Operations, Page, WorkerSlot
from synclane_provider.core.page_context import PageJob
from synclane_provider.core.records import Job
from synclane_provider.core.run.results import Outcome
from synclane_provider.core.states import JobMode, JobStatus
from tests.support.helpers import declare, owners, products

CORE = Path(synclane_provider.core.__file__).parent

LAYERS = {"": 0, "db": 1, "declare": 2, "land": 2, "plan": 3, "run": 3, "ops": 4}
"""Each folder's layer (``""`` is the vocabulary at the top of core); declare and land stand side by side, and so
do plan and run."""

FACADES = {"__init__", "schema"}
"""Modules at the top of core that only re-export: the package's public names and the schema command's name."""


def _folder(module: str) -> str:
    """The folder of ``synclane_provider.core.<folder>.<name>`` (``""`` for a module at the top of core)."""
    parts = module.split(".")[2:]
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else ""


def _imports(path: Path) -> set[str]:
    """The core modules a file imports (``from synclane_provider.core.x import y`` and ``import …``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("synclane_provider.core"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("synclane_provider.core"))
    return {
        name
        for name in found
        if (CORE / Path(*name.split(".")[2:])).with_suffix(".py").exists()
        or (CORE / Path(*name.split(".")[2:]) / "__init__.py").exists()
    }


def _module(path: Path) -> str:
    relative = path.relative_to(CORE).with_suffix("")
    parts = [part for part in relative.parts if part != "__init__"]
    return ".".join(["synclane_provider", "core", *parts])


def _upward_imports() -> list[str]:
    wrong = []
    for path in sorted(CORE.rglob("*.py")):
        if path.parent == CORE and path.stem in FACADES:
            continue
        module = _module(path)
        own = _folder(module) if path.name != "__init__.py" else (path.parent.name if path.parent != CORE else "")
        for imported in sorted(_imports(path)):
            theirs = _folder(imported)
            if LAYERS[theirs] > LAYERS[own] or (LAYERS[theirs] == LAYERS[own] and theirs != own):
                wrong.append(f"{module} ({own or 'vocabulary'}) imports {imported} ({theirs or 'vocabulary'})")
    return wrong


def test_no_engine_module_imports_from_a_layer_above_its_own():
    assert _upward_imports() == []


def test_every_engine_module_stands_in_a_known_folder():
    folders = {path.parent.relative_to(CORE).parts[0] for path in CORE.rglob("*.py") if path.parent != CORE}
    assert folders <= set(LAYERS) - {""}


def test_each_folder_says_what_lives_there_and_what_it_may_import():
    for folder in set(LAYERS) - {""}:
        doc = ast.get_docstring(ast.parse((CORE / folder / "__init__.py").read_text(encoding="utf-8"))) or ""
        assert "Lives here:" in doc and "May import:" in doc, folder


ROW_VALUES = {int, str, bool, datetime, JobMode, JobStatus, type(None)}
"""What a job's fields may hold: the values of a row of the jobs table, nothing that can be called."""


def test_a_job_is_a_row_of_plain_values():
    """What a handler may do during a page is its page's context (core/page_context.py), never a field of the job."""
    hints = typing.get_type_hints(Job)
    kinds = {name: set(typing.get_args(hint) or (hint,)) for name, hint in hints.items()}
    assert {name: kind - ROW_VALUES for name, kind in kinds.items() if kind - ROW_VALUES} == {}
    assert set(hints) == {f.name for f in dataclasses.fields(Job)}


def test_a_job_carries_no_attribute_beside_its_fields():
    """Nothing in the engine writes to a job's ``__dict__`` or sets an attribute on a frozen record, except
    Job.from_row (filling a new row's fields) and a declaration's ``__post_init__`` (normalizing its own)."""
    smuggled = []
    for path in sorted(CORE.rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                where = f"{_module(path)}.{function.name}:{getattr(node, 'lineno', '?')}"
                if (isinstance(node, ast.Attribute) and node.attr == "__dict__") or _is_vars(node):
                    if (path.name, function.name) != ("records.py", "from_row"):
                        smuggled.append(f"{where} reaches into __dict__")
                elif isinstance(node, ast.Call) and _sets_attribute(node):
                    first = node.args[0] if node.args else None
                    if function.name != "__post_init__" or not (isinstance(first, ast.Name) and first.id == "self"):
                        smuggled.append(f"{where} sets an attribute by name")
    assert smuggled == []


def _is_vars(node: ast.AST) -> bool:
    """``vars(…)``: an object's ``__dict__`` by another name."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"


def _sets_attribute(call: ast.Call) -> bool:
    """``setattr(…)`` or ``object.__setattr__(…)``."""
    return (isinstance(call.func, ast.Name) and call.func.id == "setattr") or (
        isinstance(call.func, ast.Attribute) and call.func.attr == "__setattr__"
    )


NOT_ON_A_JOB = {"requeue_count"}
"""Columns of the jobs table a Job does not carry: how often a job was requeued is read by the requeue alone."""


def test_a_jobs_fields_are_the_columns_of_the_jobs_table(admin, declaration, database):
    """A field that is not a column (a callable, a flag for a far module) has no place on a Job."""
    with Operations(declaration, database) as ops:
        ops.enqueue("shops", "acme", "products")  # the table made, as a worker finds it
    columns = {
        row["column_name"]
        for row in admin.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'jobs'",
            (declaration.schema,),
        )
    }
    assert {f.name for f in dataclasses.fields(Job)} == columns - NOT_ON_A_JOB
    assert NOT_ON_A_JOB <= columns
    assert Job.__dataclass_params__.frozen and PageJob.__dataclass_params__.frozen


def test_the_jobs_a_worker_builds_hold_their_fields_and_nothing_else(declaration, database, received):
    """The jobs a worker builds carry exactly their dataclass fields, none of them callable: each job its handler is
    given (the page's context besides) and the job of each attempt's result (for a job whose only page completes it,
    the very job the slot took). Whatever is put on a job on its way from the row to the handler, by
    ``object.__setattr__`` or by a field of its own, shows here."""
    with Operations(declaration, database) as ops:
        ops.enqueue("shops", "acme", "products")  # one page
        ops.enqueue("shops", "globex", "products")  # two pages
    with WorkerSlot(declaration, database, "shops") as slot:
        results = [slot.run_one(then_continue=False), slot.run_one(then_continue=False)]
    ended = {r.job.owner: r for r in results if r is not None}
    assert {owner: r.outcome for owner, r in ended.items()} == {"acme": Outcome.COMPLETED, "globex": Outcome.COMPLETED}
    assert ended["acme"].job.cursor is None  # its one page saved no cursor: the result's job is the job as taken
    row, page = {f.name for f in dataclasses.fields(Job)}, {f.name for f in dataclasses.fields(PageJob)}
    assert page == row | {"context"}
    built = [(f"result {owner}", r.job, row) for owner, r in sorted(ended.items())]
    built += [(f"handler's {job.owner} {job.cursor}", job, page) for job in received]
    assert len(received) == 3
    assert [(name, type(job).__name__) for name, job, _ in built] == [
        (name, "Job" if fields == row else "PageJob") for name, _, fields in built
    ]
    assert {name: set(vars(job)) ^ fields for name, job, fields in built if set(vars(job)) != fields} == {}
    assert {
        name: [k for k, v in vars(job).items() if callable(v)]
        for name, job, _ in built
        if any(callable(v) for v in vars(job).values())
    } == {}


@pytest.fixture
def received() -> list[PageJob]:
    return []


@pytest.fixture
def declaration(schema, received):
    def handler(job: PageJob) -> Page:
        received.append(job)
        return Page("1" if job.owner == "globex" and job.cursor is None else None, 1)

    return declare(schema, products(handler), owner_source=owners("acme", "globex"))


@pytest.fixture
def database(declaration, database_url):
    return declaration.database(database_url)
