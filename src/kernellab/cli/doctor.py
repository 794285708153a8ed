"""Task: doctor."""
from __future__ import annotations

import json

from invoke import Exit

from .. import doctor as doc
from . import ENGINE_HELP, task


@task(help={"target": "check against this named target (default: this machine's)",
            "json": "print the machine fingerprint as JSON (for export-image --check-target)", "engine": ENGINE_HELP})
def doctor(c, target=None, json_=False, engine=None):
    """Check engines (Docker, Podman), builds, disk, GPUs, driver, GPU-in-container mode, network, base image."""
    findings, ctx = doc.run(target)
    if json_:
        print(json.dumps(doc.fingerprint(findings, ctx), indent=2))
    else:
        print(f"kernellab doctor (target: {ctx.target or 'none'})")
        print(doc.render_text(findings))
    failed = [f.name for f in findings if f.severity == doc.FAIL]
    if failed:
        raise Exit(f"kernellab: doctor found {len(failed)} failing check(s): {', '.join(failed)}.", code=1)
