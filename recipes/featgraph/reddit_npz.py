"""DGL's Reddit download (reddit.zip: reddit_graph.npz, a scipy COO adjacency) as the two files FeatGraph's
benchmarks read, made as benchmark/download_reddit_dataset.py makes them (which needs DGL < 1.0 for the download):
canonical CSR with float32 data, and the same matrix as COO.

    python3 reddit_npz.py /download/reddit.zip /out
"""
import sys
import zipfile
from pathlib import Path

import scipy.sparse


def main() -> None:
    archive, out = Path(sys.argv[1]), Path(sys.argv[2])
    with zipfile.ZipFile(archive) as z:
        name = next(n for n in z.namelist() if n.endswith("reddit_graph.npz"))
        with z.open(name) as f:
            adj = scipy.sparse.load_npz(f).tocsr()
    adj.sort_indices()
    adj.sum_duplicates()
    assert adj.has_canonical_format
    adj.data = adj.data.astype("float32")
    scipy.sparse.save_npz(out / "reddit_csr_float32.npz", adj)
    scipy.sparse.save_npz(out / "reddit_coo_float32.npz", adj.tocoo())
    print(f"reddit: {adj.shape[0]} nodes, {adj.nnz} edges")


if __name__ == "__main__":
    main()
