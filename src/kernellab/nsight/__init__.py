"""NVIDIA's kernel tools: Nsight Compute and Nsight Systems (`invoke profile`), compute-sanitizer (`invoke sanitize`).

tools     the registry: where ncu, compute-sanitizer and nsys are, and whether this machine lets ncu read counters
ncu       ncu's command lines and what it gives back (CSV)
profile   `python -m kernellab.nsight.profile`: exactly the launches the benchmark times, under ncu
calls     the calls a profiled child makes: each implementation's pass at the bench inputs, warmed up
report    the record and the page `invoke profile` writes
sanitize  `python -m kernellab.nsight.sanitize`: an op's checks under compute-sanitizer
nsys      Nsight Systems' command lines, the environment a profiled program gets, the export and its reader
timeline  where the GPU time went in one capture: kernels per NVTX range, launch gaps, tables, the picture
op_timeline  `python -m kernellab.nsight.op_timeline` (`invoke profile --timeline`): an op's calls under nsys

Import the module you need; this face imports nothing.
"""
