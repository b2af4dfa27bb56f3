"""Operating a SyncLane: the operations a CLI, a DAG or a page calls, the monitor's views, health.

Lives here: ``operations`` (plan, prune, cancel, retry, pause and the other commands), ``monitor`` (the four
views of the monitoring page), ``health`` (stuck, starved and late jobs), ``resync`` (a re-sync request made).

May import: everything else in ``core``; nothing in ``core`` imports from here.
"""
