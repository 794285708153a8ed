"""kernellab: reproducible Docker environments for GPU kernel research."""
import os
from pathlib import Path

__version__ = "0.1.0"

#: The repository root (the folder holding docker/, kernels/ and tasks.py).
ROOT = Path(__file__).resolve().parents[2]


def cache_root() -> Path:
    """The persistent cache (torch extensions, ccache, triton, pip, bench calibration).

    $KERNELLAB_CACHE, else ~/.cache/kernellab; in kernellab containers it is /cache, a host folder.
    """
    return Path(os.environ.get("KERNELLAB_CACHE") or Path.home() / ".cache" / "kernellab").expanduser()


def pythonpath() -> str:
    """PYTHONPATH for a child Python that must import this kernellab: its src/ first, then the caller's."""
    return os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))


def shown(path: Path) -> str:
    """A path as the user knows it: relative to the repository when inside it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def count(n: int, noun: str) -> str:
    """"1 case", "2 cases", "3 patches": a count as a sentence has it."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"
