"""What a target kind is: a Request it claims, the Spec it resolves to, its base image, tag and template.

A kind is one module under kernellab/kinds/ with one `Kind` subclass, one line in the registry
(kinds/__init__.py) and one template under docker/kinds/<name>.j2 that fills a block of
docker/Dockerfile.j2. The defaults here fit a kind built on a pulled image.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from ...engine import Engine
from ...errors import BuildError, CommandError
from ..spec import BaseFacts, Spec
from ..targets import DOCKER_DIR, Cuda, Gpu, Matrix, Os, Torch
from . import choose


@dataclass(frozen=True)
class Request:
    """What was asked for: explicit flags over a named target's fields, before any choice is made."""

    target: str | None
    gpus: tuple[Gpu, ...] | None    # sorted by capability; None: a CPU-only image (`--gpu cpu`)
    cuda: str | None = None
    torch: str | None = None
    python: str | None = None
    llvm: str | None = None
    llvm_role: str = "cuda"
    gcc: int | None = None
    os: str | None = None
    toolkit: str | None = None
    base: str | None = None
    base_facts: BaseFacts | None = None
    pip: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    with_extras: tuple[str, ...] = ()  # optional parts asked for (a target's `extras`)
    description: str = ""
    as_of: str | None = None
    nsys: bool | None = None           # None: Nsight Systems where the kind has one; False: none; True: one or refuse

    def extras(self, matrix: Matrix, torch: Torch | None = None) -> dict[str, Any]:
        """The Spec fields every kind copies: extra packages, optional extras, what goes in every image (numpy held
        below 2 beside a PyTorch built against NumPy 1), the description, the date pip resolves as of, LLVM's role."""
        names, pip = choose.extras(matrix, self.with_extras)
        image_pip = tuple(f"numpy{torch.numpy}" if p == "numpy" and torch and torch.numpy else p
                          for p in matrix.image_pip)
        return dict(extra_pip=self.pip, extra_apt=self.apt, image_pip=image_pip, image_apt=matrix.image_apt,
                    extras=names, extras_pip=pip, description=self.description, as_of=self.as_of,
                    llvm_role=self.llvm_role)


class BaseStatus(NamedTuple):
    """What `invoke doctor` says about a spec's base image: severity ("ok", "warn", "fail"), message, remedy."""

    severity: str
    message: str
    remedy: str = ""


class Kind:
    """One kind of image. Subclasses set `name` and implement `claims` and `resolve`."""

    name: str = ""
    #: The --toolkit value that selects this kind, and what it means (CUDA kinds only).
    toolkit: str | None = None
    toolkit_help: str = ""
    #: Where its template lives: <template_dir>/kinds/<name>.j2, extending Dockerfile.j2.
    template_dir: Path = DOCKER_DIR

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    @property
    def template(self) -> str:
        return f"kinds/{self.name}.j2"

    # ------------------------------------------------------------ resolution
    def claims(self, req: Request) -> bool:
        """Whether this kind builds req (the registry asks each kind in order; the first claim wins)."""
        raise NotImplementedError

    def probes(self, base: str | None) -> bool:
        """Whether resolving a request with this base needs facts found by running the image (BaseFacts)."""
        return False

    def resolve(self, matrix: Matrix, req: Request) -> Spec:
        """The complete Spec for req, or ResolveError naming the conflict and the nearest valid choice."""
        raise NotImplementedError

    def nsys(self, matrix: Matrix, cuda: Cuda) -> str | None:
        """The Nsight Systems (matrix.toml's pin) this kind puts in an image of that CUDA; None: none."""
        return None

    def no_nsys(self, cuda: Cuda) -> str:
        """Why an image of this kind has none: the summary's words, and the reason a request for one is refused."""
        return "host's, mounted at run time"

    def context_files(self, spec: Spec) -> dict[str, Path]:
        """Files the template reads from the build context beyond the usual ones: {name in the context: source}."""
        return {}

    # ------------------------------------------------------------ tag and template
    def tag_parts(self, spec: Spec) -> list[str]:
        """The readable part of the image tag, before the spec's short hash."""
        raise NotImplementedError

    def title(self, spec: Spec) -> str:
        return f"CUDA {spec.cuda_full}, PyTorch {spec.torch}, Python {spec.python}, for {', '.join(spec.gpus)}"

    def context(self, spec: Spec, matrix: Matrix) -> dict[str, Any]:
        """What the template needs beyond the spec: the OS toolchain (packages, PPA, apt.llvm.org)."""
        os_ = matrix.os.get(spec.os) if spec.os else None
        return dict(
            os=os_, apt_packages=_apt(spec, os_) if os_ else [],
            python_ppa=bool(os_ and spec.python != os_.python),
            llvm_apt=bool(os_ and spec.llvm and spec.llvm not in os_.llvm),
            pip_packages=[p for p in (spec.torch_requirement, *spec.image_pip, *spec.extra_pip) if p],
            # A dated target (as_of): everything but kernellab's own tools resolves as of its date.
            dated_packages=[p for p in (spec.torch_requirement, *spec.image_pip, *spec.extra_pip)
                            if p and p not in matrix.undated],
            undated_packages=[p for p in spec.image_pip if p in matrix.undated], pip_as_of=matrix.pip_as_of,
        )

    # ------------------------------------------------------------ the base image
    def from_ref(self, spec: Spec) -> str:
        """The image the Dockerfile starts FROM (before a lock pins it by digest)."""
        return spec.base

    def ensure_base(self, spec: Spec, *, engine: Engine, out: IO[str]) -> tuple[str, str]:
        """Make sure the base is present (pull it); return (reference, digest or image ID)."""
        ref = self.from_ref(spec)
        if not engine.exists(ref):
            out.write(f"pulling base image {ref}\n")
            try:
                engine.pull(ref, out)
            except CommandError as e:
                last = e.tail.strip().splitlines()[-1] if e.tail.strip() else "no output"
                raise BuildError(
                    f"base image {ref} is not here and could not be pulled ({last}); "
                    f"on a machine that can pull it run `{engine.name} pull {ref}` and `invoke export-image {ref}`, "
                    f"then `invoke import-image DIR` here.") from None
        digests = engine.repo_digests(ref)
        return ref, (digests[0] if digests else engine.image_id(ref))

    def base_status(self, spec: Spec, engine: Engine) -> BaseStatus:
        ref = self.from_ref(spec)
        if engine.exists(ref):
            return BaseStatus("ok", f"{ref} is present")
        return BaseStatus("warn", f"{ref} is not present; the build will try to pull it",
                          f"without registry access: `invoke import-image DIR` of a bundle with {ref}")


def py_part(spec: Spec) -> str:
    return "py" + spec.python.replace(".", "")


def sm_part(spec: Spec) -> str:
    return "-".join("sm" + cc.replace(".", "") for cc in spec.ccs)


def _apt(spec: Spec, os_: Os) -> list[str]:
    pkgs = list(spec.image_apt) + [f"gcc-{spec.gcc}", f"g++-{spec.gcc}"]
    if spec.python == os_.python:
        pkgs += [f"python{spec.python}", f"python{spec.python}-venv", f"python{spec.python}-dev"]
    if spec.llvm and spec.llvm in os_.llvm:  # LLVM as a library wants llvm-config and its headers, not clang
        pkgs += [f"llvm-{spec.llvm}-dev"] if spec.llvm_role == "library" else \
                [f"clang-{spec.llvm}", f"lld-{spec.llvm}", f"llvm-{spec.llvm}-dev"]
    pkgs += list(spec.extra_apt)
    return list(dict.fromkeys(pkgs))
