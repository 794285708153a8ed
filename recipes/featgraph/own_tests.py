"""FeatGraph's own correctness tests for one target, as its tests' `__main__` runs them, one line each.

    python3 own_tests.py x86|cuda

Each of FeatGraph's tests builds its SpMM or SDDMM module at a few partitionings and checks the result against scipy
(rtol and atol 1e-4), on the random matrices of its `__main__` (127 x 255, density 0.1; seed 0 here). The tests are
imported from /src/featgraph/tests, not copied. Prints `passed: N` and `failed: N` (the recipe's metric and sanity
check) and exits 1 when one failed.
"""
import importlib
import sys
import traceback

import numpy as np
import scipy.sparse

TESTS = "/src/featgraph/tests"


def cases(target: str):
    """(module, test function, its argument or None) in the order of the tests' __main__."""
    rng = np.random.RandomState(0)
    csr = scipy.sparse.random(127, 255, density=0.1, format="csr", random_state=rng).astype("float32")
    coo = scipy.sparse.random(127, 255, density=0.1, format="coo", random_state=rng).astype("int32")
    yield "test_module_spmm", f"test_vanilla_spmm_{target}", csr
    yield "test_module_sddmm", f"test_vanilla_sddmm_{target}", coo
    if target == "x86":   # the partitioning helpers both targets use, checked once
        yield "test_util", "test_util_convert_csr_to_dds", None
        yield "test_util", "test_util_partition_adj_coo_2d", None


def main() -> int:
    target = sys.argv[1] if len(sys.argv) == 2 else ""
    if target not in ("x86", "cuda"):
        print("usage: own_tests.py x86|cuda", file=sys.stderr)
        return 2
    sys.path.insert(0, TESTS)
    np.random.seed(0)   # the tests draw their features from numpy's global generator
    passed = failed = 0
    for module, name, arg in cases(target):
        test = getattr(importlib.import_module(module), name)
        try:
            test() if arg is None else test(arg)
        except Exception:   # an assertion (a wrong result) or a build error: both are failures, with the traceback
            traceback.print_exc()
            print(f"{module}.{name}: FAILED", flush=True)
            failed += 1
        else:
            print(f"{module}.{name}: passed", flush=True)
            passed += 1
    print(f"passed: {passed}")
    print(f"failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
