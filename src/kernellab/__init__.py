"""kernellab: reproducible Docker environments for GPU kernel research."""
from pathlib import Path

__version__ = "0.1.0"

#: The repository root (the folder holding docker/, kernels/ and tasks.py).
ROOT = Path(__file__).resolve().parents[2]
