"""Images: what a target is made of, and how it is built.

targets    matrix.toml, wheels.toml (which GPUs each PyTorch wheel runs on) and targets.toml, read and checked
target_table  one [target.NAME] table (targets.toml, or a recipe's inline target) checked into a Target
nsys       Nsight Systems facts: which CUDA each release line traces (nsys_traces), where an image keeps it
published  `make check-matrix`: the matrix's PyTorch releases against what PyPI publishes
spec       Spec (a resolved target) and BaseFacts (what a base image already has)
resolve    a request (target, versions, GPUs) -> one Spec, every version pinned and validated
kinds/     one module per way of making an image (nvidia/cuda base, Debian toolkit, PyPI toolkit, ...)
render     a Spec -> its Dockerfile
debian     Debian-made base images (mmdebstrap) and the archive they come from
network    proxies and extra CA certificates: reach registries without putting secrets in layers
locks      the lock of a built image: what it resolved to, and rebuilding from it
contents   an image's files from its save archive
compat     can this image run on that GPU and driver (one Finding type)
builder    the build itself: base, Dockerfile, the engine's build, the lock, labels, tags

Import the module you need: this face imports nothing, so low layers can use `targets` or `spec`
without loading the build.
"""
