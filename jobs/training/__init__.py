"""Training: the engine that trains one run, the Trainer's wiring, the methods (fine-tuning through the
Trainer, SetFit, the sentence head), the model catalogue, LoRA, attention kernels, sampling, and the
outputs every method writes.

May use ``jobs.specs``, ``jobs.tasks``, ``jobs.evaluation``, ``jobs.progress`` and ``storage``; never the queue.
"""
