"""What a Kubernetes user would submit instead: one Indexed Job per GPU type, rendered for --dry-run.

kernellab does not drive Kubernetes (no operator, no API calls): `scheduler = "kubernetes"` in the
profile makes `--dry-run` print a manifest per GPU type that `kubectl apply -f` takes. The manifest
is JSON, which is YAML too. [kubernetes] in the profile gives the namespace, the image (a registry
reference the cluster can pull), the persistent volume claim that holds the shared folder, the GPU
resource name and a node selector per GPU type.
"""
from __future__ import annotations

import json
import re
import shlex
from typing import Any

from ..container.runner import caller_ids
from .plan import Plan
from .profile import Profile


def job_manifest(plan: Plan, profile: Profile, gpu: str) -> str:
    """An Indexed Job running gpu's tasks: pod i runs task i, one GPU each, the shared claim at the same path."""
    k = profile.kubernetes
    tasks = plan.tasks_of(gpu)
    uid, gid = caller_ids()
    shared = str(profile.shared)
    # Pod i picks its command by JOB_COMPLETION_INDEX, as array task i picks it by SLURM_ARRAY_TASK_ID.
    # Variables every task shares go in the pod's env; a task's own (KERNELLAB_OPS, KERNELLAB_RESULTS,
    # KERNELLAB_TASK) are exported in its branch, as each array task has its own in the plan.
    env = {key: value for key, value in (tasks[0].env.items() if tasks else ())
           if all(t.env.get(key) == value for t in tasks)}
    cases = " ".join(f"{t.index}) " + "".join(f"export {key}={shlex.quote(value)}; " for key, value in t.env.items()
                                              if key not in env) + f"exec {shlex.join(t.argv)};;" for t in tasks)
    name = re.sub(r"[^a-z0-9-]+", "-", f"kl-{plan.job}-{gpu}-{plan.run}".lower())[:63].strip("-")
    selectors: dict[str, Any] = (k.get("node_selectors") or {}).get(gpu) or {}
    manifest = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, **({"namespace": k["namespace"]} if k.get("namespace") else {}),
                     "labels": {"kernellab/run": plan.run[:63], "kernellab/gpu-type": gpu}},
        "spec": {
            "completionMode": "Indexed", "completions": len(tasks),
            "parallelism": profile.throttle or len(tasks), "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                **({"nodeSelector": selectors} if selectors else {}),
                "securityContext": {"runAsUser": uid, "runAsGroup": gid},
                "containers": [{
                    "name": "task", "image": k.get("image") or plan.image.get("ref", "<image>"),
                    "workingDir": "/workspace",
                    "command": ["bash", "-c", f"case $JOB_COMPLETION_INDEX in {cases} esac"],
                    "env": [{"name": key, "value": value} for key, value in {
                        **env, "KERNELLAB_CACHE": f"{shared}/cache", "HOME": f"{shared}/cache/home",
                        "PYTHONPATH": "/workspace/src"}.items()],
                    "resources": {"limits": {k.get("gpu_resource", "nvidia.com/gpu"): 1}},
                    "volumeMounts": [{"name": "shared", "mountPath": shared},
                                     {"name": "shared", "mountPath": "/workspace",
                                      "subPath": f"runs/{plan.run}/workspace"}],
                }],
                "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": k.get("claim", "kernellab-shared")}}],
            }},
        },
    }
    return json.dumps(manifest, indent=1)
