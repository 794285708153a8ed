"""A random graph in the files FeatGraph's benchmarks read, as a stand-in for Reddit where its data cannot be had.

FeatGraph's benchmark/download_reddit_dataset.py writes Reddit's adjacency matrix twice with scipy.sparse.save_npz:
PREFIX_csr_float32.npz (canonical CSR: sorted indices, no duplicates; int32 indices, float32 data; SpMM reads it)
and PREFIX_coo_float32.npz (the same matrix as COO; SDDMM reads it). This writes the same two files for an
N x N matrix with exactly E distinct entries, uniform at random (fixed seed), all ones. It has Reddit's size and
density when asked (--nodes 232965 --edges 114615892), not its clustering: the shape of the work, not its locality.

    python3 make_graph.py --nodes 2000 --edges 80000 --out /out/reddit
"""
import argparse
import time

import numpy as np
import scipy.sparse


def random_csr(nodes: int, edges: int, seed: int) -> scipy.sparse.csr_matrix:
    total = nodes * nodes
    if edges > total:
        raise SystemExit(f"{edges} edges do not fit in a {nodes} x {nodes} matrix")
    rng = np.random.default_rng(seed)
    keys = np.empty(0, dtype=np.int64)
    while keys.size < edges:  # linear positions row * N + col, until enough distinct ones
        more = rng.integers(0, total, size=int((edges - keys.size) * 1.05) + 1024, dtype=np.int64)
        keys = np.unique(np.concatenate([keys, more]))
    if keys.size > edges:  # drop a random surplus; np.unique left them sorted, so the CSR is canonical
        keep = np.sort(rng.choice(keys.size, size=edges, replace=False))
        keys = keys[keep]
    indptr = np.zeros(nodes + 1, dtype=np.int32)
    np.cumsum(np.bincount(keys // nodes, minlength=nodes), out=indptr[1:])
    cols = (keys % nodes).astype(np.int32)
    adj = scipy.sparse.csr_matrix((np.ones(edges, dtype=np.float32), cols, indptr), shape=(nodes, nodes))
    assert adj.has_canonical_format
    return adj


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--edges", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="prefix: writes PREFIX_csr_float32.npz and PREFIX_coo_float32.npz")
    a = p.parse_args()
    start = time.time()
    csr = random_csr(a.nodes, a.edges, a.seed)
    scipy.sparse.save_npz(f"{a.out}_csr_float32.npz", csr)
    scipy.sparse.save_npz(f"{a.out}_coo_float32.npz", csr.tocoo())
    print(f"{a.nodes} nodes, {csr.nnz} edges ({csr.nnz / a.nodes:.1f} per node), seed {a.seed}: "
          f"{time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
