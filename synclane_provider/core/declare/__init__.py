"""What a user declares: lanes, queues, job types and owners, rates, retry policies, owner sources.

Lives here: ``declarations`` (SyncLane, Queue, SnapshotType, WindowedType, Owner), ``ratelimit`` (Rate),
``retry`` (RetryPolicy, Jitter), ``stretch`` (OwnerStretch: owners in trouble asked less often), ``retry_after`` (reading a Retry-After header), ``owners`` (resolving owner
sources).

May import: the vocabulary at the top of ``core`` and ``db``; nothing from ``plan``, ``run`` or ``ops``.
"""
