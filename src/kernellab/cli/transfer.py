"""Tasks that carry an image to a machine that cannot pull: export-image, import-image."""
from __future__ import annotations

import sys
from typing import Any

from .. import engine as engines
from .. import progress, transfer
from ..image.compat import WARN
from . import ENGINE_HELP, task


class _Meter:
    """Progress of each phase (export, verify, import) in bytes: a bar on a terminal, a line every 15 s in a log."""

    def __init__(self) -> None:
        self.bars: dict[str, progress.Bar] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if phase not in self.bars:
            for bar in self.bars.values():
                bar.close()
            self.bars[phase] = progress.Bar(total, phase, unit="B", scale=True)
        self.bars[phase].update_to(done)

    def done(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _resolve_image(image: str) -> str:
    """An image reference as given, or the image of the named target of that name."""
    from ..image import builder, targets

    if engines.current().exists(image) or image not in targets.load().targets:
        return image
    return builder.image_for_target(image).ref


@task(
    help={
        "image": "image name or ID to export, or a target name (its kernellab:<target> image)",
        "output": "folder to write the bundle folder into (default: bundles/)",
        "chunk-size": "size of each chunk file, e.g. 1G, 200M (default 1G)",
        "level": "zstd level, 1 fastest .. 19 smallest (default 3, already smaller than gzip)",
        "since": "manifest.json (or bundle folder) the receiver already loaded: ship only the layers it lacks",
        "check-target": "`invoke doctor --json` output saved on the receiving machine: warn if it cannot run the image",
        "engine": ENGINE_HELP,
    },
    positional=["image"],
    auto_shortflags=False,  # automatic ones would give --check-target `-h`, which reads as --help
)
def export_image(c: Any, image: str, output: str = "bundles",
                 chunk_size: str = "1G", level: int = 3, since: str | None = None,
                 check_target: str | None = None, engine: str | None = None) -> None:
    """Write an image as a chunked, checksummed bundle for a machine that cannot pull."""
    ref = _resolve_image(image)
    warnings = _check(ref, check_target) if check_target else []
    meter = _Meter()
    # The engine gathers all layers before the first byte flows (minutes for a large image).
    print(f"Exporting {ref} into {output}/ ({engines.current().name} save prepares the layers first) ...",
          file=sys.stderr)
    try:
        bundle = transfer.export_image(ref, output, chunk_size=chunk_size, level=int(level), since=since,
                                       progress=meter)
    finally:
        meter.done()
    m = transfer.read_manifest(bundle)
    ratio = m.stream.compressed / max(m.stream.tar_bytes, 1)
    shipped = sum(1 for layer in m.layers if layer.shipped)
    print(f"Wrote {bundle}: {len(m.chunks)} chunk(s), {m.stream.compressed / 1e6:,.1f} MB "
          f"({ratio:.0%} of {m.stream.tar_bytes / 1e6:,.1f} MB), {shipped} of {len(m.layers)} layers.")
    print(f"Copy the folder, then on the receiver: invoke import-image {bundle.name}  (see its README.txt)")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)


def _check(ref: str, fingerprint_path: str) -> list[str]:
    labels = engines.current().labels(ref)
    findings = transfer.check_target(labels, transfer.load_fingerprint(fingerprint_path))
    for f in findings:
        print(f"{'warning' if f.severity == WARN else f.severity}: {f.message}", file=sys.stderr)
    if not findings:
        print("The receiving machine's driver and GPUs suit this image.", file=sys.stderr)
    return [f.message for f in findings if f.severity == WARN]


@task(
    help={
        "bundle": "the bundle folder (as copied from the sender)",
        "to": "convert instead of loading into the engine: sif (Apptainer) or sqsh (enroot); "
              "or docker/podman to load into that engine",
        "output": "with --to: the file to write (default: ./BUNDLE.sif or ./BUNDLE.sqsh)",
        "engine": ENGINE_HELP,
    },
    positional=["bundle"],  # required: invoke only fills positionals that have no default
)
def import_image(c: Any, bundle: str, to: str | None = None, output: str | None = None,
                 engine: str | None = None) -> None:
    """Verify a bundle chunk by chunk, then load it into the engine or convert it (--to sif|sqsh)."""
    meter = _Meter()
    try:
        result = transfer.import_bundle(bundle, to=to, output=output, progress=meter)
    finally:
        meter.done()
    rate = result.tar_bytes / 1e6 / max(result.seconds, 1e-6)
    if result.output:
        print(f"Wrote {result.output} from {result.image_id[:19]} in {result.seconds:.1f} s.")
    else:
        print(f"Loaded {result.image_id[:19]} ({', '.join(result.tags) or 'untagged'}) in "
              f"{result.seconds:.1f} s, {rate:,.0f} MB/s; image ID matches the manifest.")
