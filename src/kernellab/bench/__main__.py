"""`python -m kernellab.bench`: what `invoke bench` runs inside the target's container.

`python -m kernellab.bench merge RUN [--gpu-types a,b]` merges a sweep across GPU types (bench.merge).
"""
from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["merge"]:  # the bench's own options are all flags, so "merge" cannot be one
        from .merge import main as merge_main

        sys.exit(merge_main(sys.argv[2:]))
    sys.exit(main())
