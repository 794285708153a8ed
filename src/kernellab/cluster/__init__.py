"""Tests, benchmarks and any command on a Slurm cluster, in the target's image, across GPU types.

profile   the cluster profile (cluster.toml): scheduler, partition, GPU types, runtime, shared folder
plan      what a run does: one task per op (or per --tasks) per GPU type, the repository snapshot
images    the image in the nodes' format, made once per image ID in the shared folder
runtimes  how a node starts a task: docker, podman, charliecloud, apptainer, enroot (pyxis), none
slurm     sbatch scripts, submission, task states, cancellation
node      the entry point a task runs on its node (`python3 -m kernellab.cluster.node`)
runs      submit, follow, gather, merge, resume: what `invoke test|bench|submit --on slurm` call
kube      a Kubernetes Job manifest per GPU type, for --dry-run only
"""
