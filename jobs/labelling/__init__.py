"""The labelling loop: cold-start coverage, the fast model in the loop, what to ask next, the learning curve.

``coverage``, ``fast_model``, ``strategies`` and ``curve`` are pure numpy / scikit-learn functions on arrays (no
database, no torch); ``cache`` and ``job`` (the label-embed and label-refit jobs) read and write a project's
embeddings and rows. The room may use ``jobs.evaluation.stats`` and ``jobs.training`` (for embeddings), never the
queue, the sweeps or the job process.
"""
