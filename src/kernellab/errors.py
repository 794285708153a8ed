"""Typed errors. Each message is one sentence that says what went wrong and what to do next.

Library code raises these; only the task layer (`kernellab.cli`) turns them into an exit.
"""
from __future__ import annotations


class KernellabError(Exception):
    """Base class: str(error) is shown to the user as is, without a traceback."""

    exit_code = 1


class ConfigError(KernellabError):
    """The version matrix or a target definition is malformed."""


class ResolveError(KernellabError):
    """A requested combination is unknown or cannot work; nothing was built."""

    exit_code = 2


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

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class RecipeError(KernellabError):
    """A recipe is unknown, malformed, or asks for what this machine or its sources cannot give."""

    exit_code = 2
