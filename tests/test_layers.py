"""The engine's folders are layers: a module imports from its own layer or the ones below it, never from above.

From the bottom: the vocabulary at the top of ``core`` (errors, states, records, clock, durations, metrics),
then ``db``, ``declare``, ``plan``, ``run``, ``ops``. ``plan`` and ``run`` do not import each other; only
``ops`` brings them together. Each folder's ``__init__`` docstring says the same in words.
"""

from __future__ import annotations

import ast
from pathlib import Path

import synclane_provider.core

CORE = Path(synclane_provider.core.__file__).parent

LAYERS = {"": 0, "db": 1, "declare": 2, "plan": 3, "run": 3, "ops": 4}
"""Each folder's layer (``""`` is the vocabulary at the top of core); plan and run stand side by side."""

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
