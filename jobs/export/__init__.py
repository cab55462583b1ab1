"""ONNX export of a finished run's model: variants, parity with PyTorch, a speed report, and serving them.

- ``jobs.export.onnx``: the exporter (``torch.onnx.export``, TorchScript path) and the int8/fp16 conversions;
- ``jobs.export.runtime``: ``OnnxModel``, an exported variant standing in for the torch model wherever the
  predictors call one (playgrounds, prediction jobs, the parity check);
- ``jobs.export.spec``: ``ExportSpec``, the job's ``Run.spec``;
- ``jobs.export.parity``: the variants against PyTorch on the run's validation split (agreement, score
  difference, the task's metric);
- ``jobs.export.speed``: p50/p95 latency of one row, rows per second in batches, sizes;
- ``jobs.export.job``: the queued export job (``Run.kind == "export"``): export, parity, speed, report.
"""
