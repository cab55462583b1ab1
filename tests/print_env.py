"""A stand-in training process for runner tests: prints the GPUs it was given."""
import os

print(f"CVD=[{os.environ.get('CUDA_VISIBLE_DEVICES')}]")
