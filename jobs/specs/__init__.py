"""The specs a user writes: the run spec and its fields, the default hyper-parameters that fill it, the sweep
spec, and the safe reading of spec files (YAML or JSON).

Data and validation only: imports nothing else of ``jobs``.
"""
