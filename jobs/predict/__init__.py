"""Prediction and evaluation jobs over whole files (see ``jobs.predict.spec``): inputs streamed and checked,
a run's model as a predictor, chunked resumable outputs, test-set scores.

May use ``jobs.training`` (to load a run's model), ``jobs.evaluation``, ``jobs.tasks`` and ``jobs.export``'s
runtime; never the queue.
"""
