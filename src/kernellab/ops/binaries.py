"""What a built op library holds: its hash, the GPU code in it (cuobjdump) and a hash of that code.

Two builds of the same sources with the same toolchain should give the same kernels. The library file
itself is the evidence for a C++ op; a CUDA library also embeds the names of nvcc's temporary files, so
for those the SASS (`cuobjdump -sass`, which names no file) is what is compared, next to the list of
cubins (`cuobjdump --list-elf`: one per arch, e.g. `sm_90`) and PTX.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import proc

#: `cuobjdump --list-elf --list-ptx` lines: "ELF file 1: vector_add.sm_90.cubin", "PTX file 1: vector_add.sm_90.ptx".
_ELF_ARCH = re.compile(r"\.(sm_\d+[a-z]?)\.cubin")
_PTX_ARCH = re.compile(r"PTX file.*\.(?:sm|compute)_(\d+[a-z]?)\.ptx")


@dataclass(frozen=True)
class Fingerprint:
    library_sha256: str
    sass_sha256: str | None   # None: no GPU code, or no cuobjdump here
    cubins: tuple[str, ...]   # SASS archs in the library, e.g. ("sm_80", "sm_90")
    ptx: tuple[str, ...]      # PTX in the library, by virtual arch, e.g. ("compute_90",)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(library: Path) -> Fingerprint:
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    tool = cuobjdump()
    if tool is None:
        return Fingerprint(digest, None, (), ())
    listed = proc.run([tool, "--list-elf", "--list-ptx", str(library)], check=False)
    cubins = tuple(sorted(set(_ELF_ARCH.findall(listed.stdout)), key=_arch_key))
    ptx = tuple(sorted({f"compute_{n}" for n in _PTX_ARCH.findall(listed.stdout)}, key=_arch_key))
    if not cubins:
        return Fingerprint(digest, None, (), ptx)
    sass = proc.run([tool, "-sass", str(library)], check=False).stdout
    # cuobjdump names the file it read in its header lines; the code is what matters.
    code = "\n".join(line for line in sass.splitlines() if str(library) not in line)
    return Fingerprint(digest, hashlib.sha256(code.encode()).hexdigest(), cubins, ptx)


def cuobjdump() -> str | None:
    """cuobjdump from PATH, else from $CUDA_HOME/bin (torch's idea of it)."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(home or "/usr/local/cuda") / "bin" / "cuobjdump"
    return str(candidate) if candidate.is_file() else None


def _arch_key(arch: str) -> tuple[int, str]:
    m = re.search(r"(\d+)([a-z]?)$", arch)
    return (int(m.group(1)), m.group(2)) if m else (0, arch)
