"""`python -m kernellab.bench`: what `invoke bench` runs inside the target's container."""
from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
