"""`python -m kernellab.watch -k OP [--bench] [--kernels DIR]`: what `invoke watch` runs."""
import sys

from .serve import main

if __name__ == "__main__":
    sys.exit(main())
