"""NVIDIA's kernel tools: Nsight Compute (`invoke profile`) and compute-sanitizer (`invoke sanitize`).

tools     where ncu and compute-sanitizer are, and whether this machine lets ncu read counters
ncu       ncu's command lines and what it gives back (CSV)
profile   `python -m kernellab.nsight.profile`: exactly the launches the benchmark times, under ncu
report    the record and the page `invoke profile` writes
sanitize  `python -m kernellab.nsight.sanitize`: an op's checks under compute-sanitizer

Import the module you need; this face imports nothing.
"""
