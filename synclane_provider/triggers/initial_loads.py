"""The former name of :mod:`synclane_provider.triggers.initial_load_watcher`, kept as an alias.

Airflow stores a deferred trigger's classpath in its own database, so a trigger created by an earlier
release resumes as ``synclane_provider.triggers.initial_loads.InitialLoadsTrigger``; this module names
the same class, so it still imports.
"""

from __future__ import annotations

from synclane_provider.triggers.initial_load_watcher import InitialLoadsTrigger

__all__ = ["InitialLoadsTrigger"]
