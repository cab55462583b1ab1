"""Mirrors of runs in the trackers teams already use: MLflow (``mlflow_target``) and TensorBoard
(``tensorboard_target``), fed live while a run trains (``mirror``) or afterwards from the database (``backfill``).

May use specs and storage; never the queue, sweeps or the job process (they call it), and never training.
A tracker that is down or slow never fails a run: its mirror falls behind and says so on the run.
"""
