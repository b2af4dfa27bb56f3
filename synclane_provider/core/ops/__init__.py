"""Operating a SyncLane: the operations a CLI, a DAG or a page calls, the monitor's views, health.

Lives here: ``operations`` (plan, prune, cancel, retry, pause and the other commands), ``monitor`` (the views
of the monitoring page: queues, lanes, owners, jobs), ``health`` (abandoned and stuck jobs, lagging owners, stuck
windows, owners paused or failing; the planning run's gauges), ``resync`` (a re-sync request made).

May import: everything else in ``core``; nothing in ``core`` imports from here.
"""
