"""The tutorial "Your first sync in your own Airflow" (docs/tutorials/first-sync.md), as the tests that follow it
read it: its declaration (``dags/shop_sync.py``) and its text, whose steps they check they take in its order."""

from __future__ import annotations

import re
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "first-sync.md"


def tutorial_declaration() -> str:
    """The tutorial's ``dags/shop_sync.py``, as written."""
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), re.DOTALL)
    [block] = [b for b in blocks if b.startswith('"""What to sync: the queue "shops"')]
    return block


def tutorial_steps() -> str:
    """The tutorial's text from its first step on."""
    text = TUTORIAL.read_text(encoding="utf-8")
    return text[text.index("## 1. Install the provider") :]
