"""A module only the probe job imports (``WARM_PROBE_IMPORT``): a warm process learns it from the job."""
