"""Typed errors. Each message is one sentence that says what went wrong and what to do next.

Library code raises these; only the task layer (`kernellab.cli`) turns them into an exit.
"""
from __future__ import annotations


class KernellabError(Exception):
    """Base class: str(error) is shown to the user as is, without a traceback."""

    exit_code = 1


class UsageError(KernellabError):
    """Bad input: a flag, name, file or combination the user gave cannot be used; nothing was done.

    Every task exits 2 for these (and 1 when the work itself failed), so scripts can tell the two apart.
    """

    exit_code = 2


class ConfigError(UsageError):
    """The version matrix, a target definition, an op.toml or an op selection is malformed or names nothing."""


class ResolveError(UsageError):
    """A requested combination is unknown or cannot work; nothing was built."""

    #: The nearest pins that do resolve (flag -> value, e.g. {"cuda": "11.8", "torch": "2.0.1"}), where known.
    pins: dict[str, str] = {}


class UnfitError(ResolveError):
    """A combination that cannot work (a GPU its CUDA or its PyTorch wheel cannot run on, a CUDA without a base
    image, a PyTorch without a wheel for it) where other pins may: kernellab.image.resolve names the nearest pins
    that resolve, found by resolving them."""


class EngineError(KernellabError):
    """The container engine (Docker or Podman) is missing, unreachable or refused an operation."""


#: The name the Docker-only code used; the same error.
DockerError = EngineError


class BuildError(KernellabError):
    """An image build failed; the previous image of the tag is untouched."""


class CommandError(KernellabError):
    """An external command failed."""

    def __init__(self, argv: list[str], returncode: int, tail: str = "", hint: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.tail = tail
        shown = " ".join(self.argv)
        if len(shown) > 160:
            shown = shown[:157] + "..."
        msg = f"`{shown}` exited with code {returncode}"
        if hint:
            msg += f"; {hint}"
        if tail.strip():
            msg += ". Last lines:\n" + tail.rstrip()
        super().__init__(msg)


class ExtensionError(KernellabError):
    """A kernel extension failed to compile or load."""


class BenchError(KernellabError):
    """A benchmark could not run or found a significant regression."""


class TransferError(KernellabError):
    """An image bundle could not be written, verified or loaded."""


class ProfileError(KernellabError):
    """`invoke profile` or `invoke sanitize` cannot run: no tool, counters locked, nothing profiled."""


class ClusterError(KernellabError):
    """A cluster run cannot be planned, submitted or gathered (profile, scheduler, runtime, shared folder)."""

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ClusterUsageError(ClusterError, UsageError):
    """Bad input for a cluster run (a malformed profile, an unknown GPU type, a GPU the image cannot run on)."""


class RecipeError(UsageError):
    """A recipe is unknown, malformed, or asks for what this machine or its sources cannot give."""
