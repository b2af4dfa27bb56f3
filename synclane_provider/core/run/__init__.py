"""Running jobs: worker slots and the pool, one attempt, the lease keeper, the lane gate, the work thread.

Lives here: ``slot`` (WorkerSlot), ``pool`` (WorkerPool), ``summary`` (Summary; ``worker`` gives all three by
their earlier address), ``runner`` (one job's attempt run and its written end read: JobRunner), ``attempt`` (one
attempt's own state and steps, and the context its pages' handlers get), ``results`` (Outcome, RunResult),
``taking`` (a slot's finishes and takes: the one write that ends an attempt, and the job taken with it),
``lease`` (keeping a taken job's lease), ``lane_gate`` (the lane's rate budget and width), ``work_thread`` (the
thread a slot's jobs and pages run on, watched for pages that hang), ``outcomes`` (an error's text for the jobs
table), ``arrivals`` (what completed jobs brought in, for the asset events), ``log_redaction`` (a handler's secrets
masked in the slots' logs), ``tokens`` (TokenSource: owners' credentials for ``job.credentials()``).

May import: the vocabulary at the top of ``core``, ``db`` and ``declare``; nothing from ``plan`` or ``ops``.
"""
