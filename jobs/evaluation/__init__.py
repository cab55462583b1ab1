"""Scores and what they mean: intervals and paired tests, per-example outcomes, calibration, baselines and
the verdict, and the post-processing of model outputs shared by playgrounds and prediction jobs.

Pure numpy / scikit-learn on outputs already computed; may use ``jobs.tasks``; never the queue or training.
"""
