"""Sweeps on the queue: Optuna asks, the queue runs each trial as a normal run, Optuna is told.

May use ``jobs.queue``'s table and states and ``jobs.specs``; never the training code.
"""
