"""kernellab tasks: `invoke --list` shows them; the logic lives in src/kernellab/."""
import sys
from pathlib import Path

# Let `invoke` work from a plain checkout even before `pip install -e .`.
sys.path.insert(0, str(Path(__file__).parent / "src"))

from kernellab.cli import collection

ns = collection()
ns.configure({"kernellab": {"target": None, "engine": None}})
