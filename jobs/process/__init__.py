"""What runs inside a job's subprocess: ``python -m jobs.process.run_job RUN_ID`` opens the database, hands
the job to training, prediction, evaluation or export by its kind, and records the outcome; plus the fake
runner that tests put in place of the real work.

The one room that joins the queue and the work; nothing in ``jobs`` imports it.
"""
