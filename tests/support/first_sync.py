"""The README's "Running it in your Airflow", as the tests that follow it read it: its declaration
(``dags/shop_sync.py``) and the section's text, whose steps they check they take in the README's order."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_declaration() -> str:
    """The README's ``dags/shop_sync.py``, as written."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    [block] = [b for b in blocks if b.startswith('"""What to sync: the queue "shops"')]
    return block


def running_it_in_your_airflow() -> str:
    """The text of the README's section "Running it in your Airflow"."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## Running it in your Airflow")
    return text[start : text.index("\n## ", start + 1)]
