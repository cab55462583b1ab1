"""Prediction and evaluation jobs over whole files (see ``jobs.predict.spec``)."""
