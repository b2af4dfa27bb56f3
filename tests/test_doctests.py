"""The examples in the engine's docstrings run as written."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import synclane_provider.core

CORE_MODULES = sorted(
    info.name for info in pkgutil.walk_packages(synclane_provider.core.__path__, "synclane_provider.core.")
)


@pytest.mark.parametrize("name", CORE_MODULES)
def test_the_docstring_examples_of_each_core_module_hold(name):
    module = importlib.import_module(name)
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failed == 0


def test_the_modules_with_examples_are_found():
    finder = doctest.DocTestFinder()
    with_examples = {
        name for name in CORE_MODULES if any(test.examples for test in finder.find(importlib.import_module(name)))
    }
    assert {
        "synclane_provider.core.declare.retry",
        "synclane_provider.core.declare.retry_after",
        "synclane_provider.core.durations",
    } <= with_examples
