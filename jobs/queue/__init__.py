"""The queue: the runs table as a queue (submit, claim, lease, finish), the run states, and the worker that
starts one subprocess per claimed job through a ``Runner``.

May use ``jobs.specs``, ``jobs.sweeps`` (a worker advances sweeps), ``jobs.tracking`` (a worker retries the
mirrors that fell behind) and ``storage``; never the training,
task, prediction or export code: a job runs in its own process (``jobs.process.run_job``).
"""
