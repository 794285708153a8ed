"""Containers: running work in a target's image.

runner     the one way kernellab runs a container (repository at /workspace, caches, the caller's UID/GID, GPUs)
devenv     dev containers and Jupyter in the same images

Import the module you need; this face imports nothing.
"""
