"""Export and import an image of at least 1 GB three ways, side by side in one run:
kernellab bundles (`docker save` -> multithreaded zstd -> checksummed chunks), `docker save | gzip`,
and plain `docker save`. Reports seconds, MB/s (of the uncompressed save archive), size on disk and
peak resident memory of the whole client-side process tree (the engine's own memory is the same
work in every variant and is not counted).

    python benchmarks/transfer.py [--gb 1.2] [--repeat 3] [--keep-image] [--work DIR] [--json FILE]

The image (tag kltest-transfer-bench:1) is built from a `docker import`-ed stub plus three COPY
layers of realistic mixed data: files from /usr/share, files from /usr/lib, and random bytes.
It is built with the legacy builder so that removing it frees its layers and every import below
really writes them. Only this image and the benchmark's own files are removed afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

IMAGE = "kltest-transfer-bench:1"
BASE = "kltest-transfer-bench-base:1"


@dataclass
class Row:
    variant: str
    phase: str
    seconds: float
    mb_per_s: float
    size_mb: float
    peak_rss_mb: float


# ---------------------------------------------------------------- measuring


class TreeMemory:
    """Samples the summed RSS of a process and all its descendants; keeps the peak."""

    def __init__(self, pids: list[int], interval: float = 0.05):
        self.roots, self.interval, self.peak = set(pids), interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(_rss(p) for p in self._tree()))
            self._stop.wait(self.interval)

    def _tree(self) -> set[int]:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        tree, grew = set(self.roots), True
        while grew:
            more = {pid for pid, parent in parents.items() if parent in tree} - tree
            tree |= more
            grew = bool(more)
        return tree

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak / 1e6


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(commands: list[list[str]], stdout_file: Path | None = None) -> tuple[float, float]:
    """Run a pipeline of argv lists (each one's stdout feeds the next); return (seconds, peak RSS MB)."""
    os.sync()  # start from a quiet disk: no variant pays for the previous one's writeback
    start = time.perf_counter()
    procs: list[subprocess.Popen] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # Wired by hand rather than through a shell, so that every stage's memory is seen.
    with open(stdout_file or os.devnull, "wb") as sink:
        for i, argv in enumerate(commands):
            last = i == len(commands) - 1
            stdin = procs[-1].stdout if procs else None
            procs.append(subprocess.Popen(argv, stdin=stdin, stdout=sink if last else subprocess.PIPE, env=env))
            if stdin:
                stdin.close()  # the next stage owns the pipe now
        memory = TreeMemory([p.pid for p in procs])
        codes = [p.wait() for p in procs]
        peak = memory.stop()
    if any(codes):
        raise SystemExit(f"{commands} failed with exit codes {codes}")
    return time.perf_counter() - start, peak


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def image_id(ref: str) -> str | None:
    p = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return p.stdout.strip() if p.returncode == 0 else None


# ---------------------------------------------------------------- the image


def _fill(dest: Path, sources: list[Path], budget: int) -> int:
    """Copy regular files from sources into dest until budget bytes; return bytes copied."""
    copied = 0
    for source in sources:
        for folder, _dirs, files in os.walk(source):
            for name in sorted(files):
                path = Path(folder) / name
                if path.is_symlink() or not path.is_file():
                    continue
                size = path.stat().st_size
                if copied + size > budget:
                    continue
                target = dest / path.relative_to("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    shutil.copyfile(path, target)
                except OSError:
                    continue
                copied += size
                if copied > budget * 0.98:
                    return copied
    return copied


def ensure_base(work: Path) -> None:
    """A 100-byte base image from `docker import`: no registry needed."""
    if image_id(BASE):
        return
    stub = work / "stub"
    (stub / "etc").mkdir(parents=True)
    (stub / "etc" / "bench").write_text("kernellab transfer benchmark\n")
    tree = subprocess.run(["tar", "-C", str(stub), "-c", "."], capture_output=True, check=True).stdout
    subprocess.run(["docker", "import", "-", BASE], input=tree, capture_output=True, check=True)


def build_image(work: Path, gb: float) -> None:
    total = int(gb * 1e9)
    ctx = work / "ctx"
    parts = {
        "share": _fill(ctx / "share", [Path("/usr/share")], int(total * 0.35)),
        "lib": _fill(ctx / "lib", [Path("/usr/lib"), Path("/usr/local/lib")], int(total * 0.45)),
    }
    rand = ctx / "rand"
    rand.mkdir(parents=True)
    with open(rand / "random.bin", "wb") as f:
        f.writelines(os.urandom(1 << 20) for _ in range(int(total * 0.2) >> 20))
    parts["rand"] = int(total * 0.2) >> 20 << 20
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nCOPY share /data/share\nCOPY lib /data/lib\nCOPY rand /data/rand\n")
    print(f"building {IMAGE}: " + ", ".join(f"{k} {v / 1e6:,.0f} MB" for k, v in parts.items()), flush=True)
    subprocess.run(["docker", "build", "-q", "-t", IMAGE, str(ctx)], check=True,
                   env={**os.environ, "DOCKER_BUILDKIT": "0"}, stdout=subprocess.DEVNULL)
    shutil.rmtree(ctx)


# ---------------------------------------------------------------- the run


def ours(call: str) -> list[str]:
    """A command that runs one kernellab.transfer call in a fresh interpreter (its own memory)."""
    return [sys.executable, "-c", f"from kernellab import transfer; {call}"]


def one_round(work: Path, want: str, turn: int) -> list[Row]:
    """Every variant once: exports (each writing its own output), then imports into a fresh engine.

    The order turns every round so that no variant always follows the same neighbour.
    """
    tar, gz, bundles = work / "image.tar", work / "image.tar.gz", work / "bundles"
    for leftover in (tar, gz):
        leftover.unlink(missing_ok=True)
    shutil.rmtree(bundles, ignore_errors=True)
    shutil.rmtree(work / "tiny", ignore_errors=True)

    def bundle() -> Path:
        return next(bundles.iterdir())

    def du(path: Path) -> float:
        return sum(f.stat().st_size for f in path.iterdir()) / 1e6 if path.is_dir() else path.stat().st_size / 1e6

    exports = [
        ("docker save", [["docker", "save", "-o", str(tar), IMAGE]], None, lambda: du(tar)),
        ("docker save | gzip", [["docker", "save", IMAGE], ["gzip", "-c"]], gz, lambda: du(gz)),
        ("kernellab export-image", [ours(f"transfer.export_image({IMAGE!r}, {str(bundles)!r})")], None,
         lambda: du(bundle())),
    ]
    rows = []
    for variant, pipeline, stdout_file, size in exports[turn % 3:] + exports[:turn % 3]:
        s, m = measure(pipeline, stdout_file)
        rows.append(Row(variant, "export", s, 0.0, size(), m))
    tar_mb = du(tar)
    for r in rows:
        r.mb_per_s = tar_mb / r.seconds
    # The same export of a 100-byte image: peak memory should not grow with image size.
    s, m = measure([ours(f"transfer.export_image({BASE!r}, {str(work / 'tiny')!r})")])
    rows.append(Row("kernellab, 100 B image", "export", s, 0.0, 0.0, m))

    imports = [
        ("docker save", [["docker", "load", "-i", str(tar)]], tar_mb),
        ("docker save | gzip", [["gzip", "-dc", str(gz)], ["docker", "load", "-q"]], du(gz)),
        ("kernellab import-image", [ours(f"transfer.import_bundle({str(bundle())!r})")], du(bundle())),
    ]
    for variant, pipeline, size_mb in imports[turn % 3:] + imports[:turn % 3]:
        docker("rmi", IMAGE)  # every import writes all layers (only the 100 B base stays)
        s, m = measure(pipeline)
        if image_id(IMAGE) != want:
            raise SystemExit(f"{variant}: the loaded image ID differs from the exported one")
        rows.append(Row(variant, "import", s, tar_mb / s, size_mb, m))
    for r in rows:
        print(f"  {r.variant:<24} {r.phase:<7} {r.seconds:6.1f} s  {r.peak_rss_mb:5.0f} MB", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.2, help="image size to build (default 1.2)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the median time of each is reported (default 3)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp folder)")
    ap.add_argument("--keep-image", action="store_true", help="keep the benchmark image for the next run")
    ap.add_argument("--json", type=Path, default=None, help="also write every round's rows here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kl-transfer-bench-", dir=args.work))
    rounds: list[list[Row]] = []
    try:
        ensure_base(work)
        if not image_id(IMAGE):
            build_image(work, args.gb)
        want = image_id(IMAGE)
        size = int(docker("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
        print(f"image {IMAGE}: {size / 1e6:,.0f} MB of layers; {os.cpu_count()} CPUs", flush=True)
        measure([["docker", "save", IMAGE]])  # warm the page cache
        for i in range(args.repeat):
            print(f"round {i + 1} of {args.repeat}", flush=True)
            rounds.append(one_round(work, want, i))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep_image:
            docker("rmi", IMAGE, check=False)
            docker("rmi", BASE, check=False)

    report(rounds)
    if args.json:
        args.json.write_text(json.dumps([[asdict(r) for r in rows] for rows in rounds], indent=2) + "\n")


def report(rounds: list[list[Row]]) -> None:
    """Median seconds over the rounds, and the highest peak memory seen."""
    rows = []
    for key in [(r.variant, r.phase) for r in rounds[0]]:
        same = [r for rows_ in rounds for r in rows_ if (r.variant, r.phase) == key]
        mid = statistics.median(r.seconds for r in same)
        first = same[0]
        rows.append(Row(first.variant, first.phase, mid, first.mb_per_s * first.seconds / mid if mid else 0.0,
                        first.size_mb, max(r.peak_rss_mb for r in same)))
    print(f"\n{'variant':<24} {'phase':<7} {'seconds':>8} {'MB/s':>7} {'size MB':>9} {'peak RSS MB':>12}")
    for r in rows:
        print(f"{r.variant:<24} {r.phase:<7} {r.seconds:8.1f} {r.mb_per_s:7.0f} {r.size_mb:9.0f} {r.peak_rss_mb:12.0f}")
    by = {(r.variant, r.phase): r for r in rows}
    ours, gz, plain = (by[(v, "export")] for v in ("kernellab export-image", "docker save | gzip", "docker save"))
    ours_in, gz_in = by[("kernellab import-image", "import")], by[("docker save | gzip", "import")]
    print(f"\nexport: {gz.seconds / ours.seconds:.1f}x faster than docker save | gzip at {ours.size_mb / gz.size_mb:.2f}x "
          f"its size ({ours.size_mb / plain.size_mb:.2f}x of plain docker save); "
          f"import: {gz_in.seconds / ours_in.seconds:.1f}x faster than gunzip | docker load")


if __name__ == "__main__":
    main()
