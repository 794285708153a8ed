"""Reading a save archive as a stream: the standard library's tarfile ("r|") against the
hand-written tar parser that kernellab.transfer used before (loaded from git), in one run.

    python benchmarks/tar_stream.py [--mb 1024] [--repeat 5] [--ref GIT_REF]

The archive is synthetic, shaped like `docker save` output (per layer a folder with VERSION, json
and layer.tar; a config; manifest.json; repositories), and reaches each reader through a pipe
from `cat`, as `docker save` output does. Each variant runs twice per round: into a sink that
drops the bytes (the reader's own cost) and through zstd level 3 into the same sink (what export
does). Rounds alternate the order; medians of wall and CPU time (of the reading process, zstd's
threads included) are reported, with tarfile's as a ratio of the hand-written parser's.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import zstandard

from kernellab.transfer import chunks, stream

OLD_PATH = "src/kernellab/transfer.py"


def old_parser(ref: str | None) -> ModuleType:
    """The single-module kernellab.transfer of `ref` (default: the last commit that has it)."""
    if ref is None:
        last = subprocess.run(["git", "log", "-1", "--format=%H", "--", OLD_PATH], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        has = subprocess.run(["git", "cat-file", "-e", f"{last}:{OLD_PATH}"], cwd=ROOT, capture_output=True).returncode
        ref = last if has == 0 else f"{last}^"
    source = subprocess.run(["git", "show", f"{ref}:{OLD_PATH}"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    path = Path(tempfile.mkdtemp(prefix="kl-old-transfer-")) / "transfer_handwritten.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("kernellab._transfer_handwritten", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "kernellab"  # its `from . import proc` resolves against the installed package
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    print(f"hand-written parser: {OLD_PATH} at {ref}")
    return module


def make_archive(path: Path, mb: int) -> int:
    """A docker-save-shaped archive of about mb megabytes; returns its size."""
    rng = os.urandom(8 << 20)
    sizes = [max(1, int(mb * f)) << 20 for f in (0.30, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02)]
    layers = []
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        def add(name: str, data: bytes | None = None, size: int = 0, source: io.RawIOBase | None = None) -> None:
            info = tarfile.TarInfo(name)
            if name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
                return
            info.size = len(data) if data is not None else size
            t.addfile(info, io.BytesIO(data) if data is not None else source)
        for i, size in enumerate(sizes):
            v1 = f"{i:064x}"
            layers.append(f"{v1}/layer.tar")
            add(f"{v1}/")
            add(f"{v1}/VERSION", b"1.0")
            add(f"{v1}/json", json.dumps({"id": v1}).encode())
            add(f"{v1}/layer.tar", size=size, source=_Repeat(rng, size))
        add("f" * 64 + ".json", json.dumps({"rootfs": {"diff_ids": layers}}).encode())
        add("manifest.json", json.dumps([{"Config": "f" * 64 + ".json", "Layers": layers}]).encode())
        add("repositories", b"{}")
    return path.stat().st_size


class _Repeat(io.RawIOBase):
    """size bytes of block, over and over (random data that costs nothing to make)."""

    def __init__(self, block: bytes, size: int):
        self.block, self.left, self.at = block, size, 0

    def read(self, n: int = -1) -> bytes:
        n = min(self.left if n < 0 else n, self.left, len(self.block) - self.at)
        data = self.block[self.at:self.at + n]
        self.at = (self.at + n) % len(self.block)
        self.left -= n
        return data


Copy = Callable[..., object]


def run_once(copy: Copy, archive: Path, compress: bool) -> tuple[float, float]:
    """Wall and CPU seconds (this process: the reader, and zstd's threads) to pass the archive
    through `copy`, read from a pipe, written to a sink."""
    sink = _Null()
    cat = subprocess.Popen(["cat", str(archive)], stdout=subprocess.PIPE)
    assert cat.stdout is not None
    start, cpu = time.perf_counter(), time.process_time()
    if compress:
        with chunks.compressor(3).stream_writer(sink, closefd=False) as z:  # type: ignore[arg-type]
            summary = copy(cat.stdout, z.write, drop=lambda m: False, capture=["manifest.json"])
    else:
        summary = copy(cat.stdout, sink.write, drop=lambda m: False, capture=["manifest.json"])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    cat.wait()
    assert getattr(summary, "complete", False), "the copy did not reach the end of the archive"
    return seconds, cpu


class _Null:
    def __init__(self) -> None:
        self.n = 0

    def write(self, data: bytes) -> int:
        self.n += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="archive size in MB (default 1024)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--ref", default=None, help="git ref of the hand-written parser (default: the last with it)")
    args = ap.parse_args()

    old = old_parser(args.ref)
    variants: dict[str, Copy] = {"hand-written": old._copy_tar, "tarfile": stream.copy_archive}
    with tempfile.TemporaryDirectory(prefix="kl-tar-bench-") as work:
        archive = Path(work) / "save.tar"
        size = make_archive(archive, args.mb)
        print(f"archive: {size / 1e6:,.0f} MB; {os.cpu_count()} CPUs; Python {sys.version.split()[0]}; "
              f"zstandard {zstandard.__version__}")
        run_once(stream.copy_archive, archive, False)  # warm the page cache
        times: dict[tuple[str, bool], list[tuple[float, float]]] = {}
        for r in range(args.repeat):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for compress in (False, True):
                for name in order:
                    times.setdefault((name, compress), []).append(run_once(variants[name], archive, compress))
    print(f"\n{'reader':<14} {'sink':<9} {'wall s':>7} {'MB/s':>6} {'CPU s':>6}   wall s of each of {args.repeat} rounds")
    wall = {key: statistics.median(w for w, _ in v) for key, v in times.items()}
    cpu = {key: statistics.median(c for _, c in v) for key, v in times.items()}
    for key, runs in times.items():
        name, compress = key
        shown = " ".join(f"{w:.2f}" for w, _ in runs)
        print(f"{name:<14} {'zstd -3' if compress else 'discard':<9} {wall[key]:7.2f} {size / 1e6 / wall[key]:6.0f} "
              f"{cpu[key]:6.2f}   [{shown}]")
    for compress, sink in ((False, "discard"), (True, "zstd -3")):
        new, old_ = ("tarfile", compress), ("hand-written", compress)
        print(f"tarfile / hand-written, {sink}: wall {wall[new] / wall[old_]:.2f}x, CPU {cpu[new] / cpu[old_]:.2f}x")


if __name__ == "__main__":
    main()
