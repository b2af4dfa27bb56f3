"""Which jobs should exist, and which may go: the planning rule, the planner that applies it, retention.

Lives here: ``rule`` (the pure rule: the jobs one owner and type want at ``now``), ``planner`` (the pass that
reads coverage and inserts what the rule wants), ``retention`` (deleting finished jobs past their keep), ``resync`` (the windows a re-sync of a range wants).

May import: the vocabulary at the top of ``core``, ``db`` and ``declare``; nothing from ``run`` or ``ops``.
"""
