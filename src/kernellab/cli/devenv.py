"""Tasks: devcontainer, notebook."""
from __future__ import annotations

from invoke import Exit

from .. import ROOT
from ..container import devenv, runner
from ..container.runner import gpu_choice
from ..image import builder
from . import ENGINE_HELP, GPU_MODE_HELP, configured_target, task


@task(help={"target": "named target (default: this machine's); its image is built first if missing",
            "gpu_mode": GPU_MODE_HELP, "engine": ENGINE_HELP})
def devcontainer(c, target=None, gpu_mode=None, engine=None):
    """Write .devcontainer/<target>/devcontainer.json (VS Code, Codespaces, devcontainers CLI) for a target's image."""
    name = configured_target(c, target) or builder.default_target()
    image = devenv.ensure_image(name)
    mode = devenv.gpu_mode(gpu_choice(gpu_mode))
    path = devenv.write_devcontainer(name, image.ref, gpu=mode or False)
    config = devenv.read_jsonc(path)
    rel = path.relative_to(ROOT)
    print(f"wrote {rel}: {image}, repo at {runner.WORKSPACE}, caches at {runner.CACHE}, "
          f"user {config['containerUser']}, GPU: {mode or 'none (hostRequirements.gpu optional)'}")
    print(f"VS Code: open this folder, then `Dev Containers: Reopen in Container` and pick `{config['name']}`.")
    print(f"CLI:     devcontainer up --workspace-folder . --config {rel}")


@task(help={"target": "named target (default: this machine's); its image needs the jupyter extra",
            "port": "port on 127.0.0.1 (default 8888; the next free one if taken)",
            "gpu_mode": GPU_MODE_HELP, "engine": ENGINE_HELP})
def notebook(c, target=None, port=8888, gpu_mode=None, engine=None):
    """JupyterLab in a target's container on 127.0.0.1, with a random token; Ctrl-C stops and removes it."""
    name = configured_target(c, target) or builder.default_target()
    image = builder.image_for_target(name)
    devenv.require_extra(image, name, devenv.JUPYTER_EXTRA)
    nb = devenv.notebook(int(port))
    if nb.port != port:
        print(f"port {port} is in use on 127.0.0.1; using {nb.port}.")
    tunnel = devenv.ssh_tunnel(nb.port)
    print(f"JupyterLab in {image} (container {nb.container}), on 127.0.0.1 only:\n  {nb.url}")
    if devenv.is_remote_session():
        print(f"This machine is remote: on your laptop run `{tunnel}`, then open the URL there.")
    else:
        print(f"From another machine: `{tunnel}`, then open the URL there.")
    print("Ctrl-C stops it and removes the container.", flush=True)
    code = runner.run(image, nb.argv, gpu=gpu_choice(gpu_mode), publish=nb.publish, secret_env=nb.env,
                          name=nb.container)
    if code in (0, 130):  # Ctrl-C, or shut down from the lab's File menu
        print(f"\nJupyterLab stopped; container {nb.container} removed.")
        return
    if code:
        raise Exit(code=code)
