"""`python -m kernellab.ops build [-k EXPR] [-v]`: what `invoke build-kernels` runs."""
import sys

from .builds import main

if __name__ == "__main__":
    sys.exit(main())
