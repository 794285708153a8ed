"""Kernel ops: the folders under kernels/, built, loaded and checked.

spec         op.toml read and checked; discovery; `-k` expressions (find_op, op_names)
backward     op.toml's [backward] read and checked (no torch)
passes       the torch side of a backward: gradients by autograd, the autograd wrapper, the three passes
library      load ops (and the one face of ops: spec's and builds' names too)
builds       build ops ahead of time; `python -m kernellab.ops build` (what `invoke build-kernels` runs)
extensions/  the keyed torch extension build behind `builds` (toolchain, sources, folder, failures)
binaries     prebuilt binaries an op may bring
compilerlog  the compiler's output, reduced to what a user reads
checks       the checks every op must pass (the kernel tests and `invoke watch` run them)
tolerances   the tolerance table the checks and the benchmark's correctness gate share

Import the module you need; this face imports nothing.
"""
