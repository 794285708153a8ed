"""Load and validate the version matrix (docker/matrix.toml, with the PyTorch wheels' architecture lists in
docker/wheels.toml) and named targets (docker/targets.toml): the matrix's typed records and its checks.

This is the only module that reads those files; everything else gets typed records from here. Each
[target.NAME] table is checked and made a Target by kernellab.image.target_table.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import ROOT
from ..errors import ConfigError
from . import nsys
from .target_table import Target, parse_target

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOCKER_DIR = ROOT / "docker"


def vkey(version: str) -> tuple[int, ...]:
    """Sort key for dotted versions ("12.10" after "12.9")."""
    return tuple(int(p) for p in version.replace("+PTX", "").split(".") if p.isdigit())


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    cc: str
    aliases: tuple[str, ...]

    @property
    def sm(self) -> str:
        return "sm_" + self.cc.replace(".", "")


@dataclass(frozen=True)
class BaseImage:
    tag: str
    cudnn: str


@dataclass(frozen=True)
class DebianToolkit:
    """CUDA from Debian's archive: `nvidia-cuda-toolkit` at `package` in the non-free archive of OS `os`; `nsys`: its
    nsight-systems(-target) of the same source package (unpacked, see docker/nsight-systems.sh)."""

    os: str
    package: str
    nsys: str | None = None


@dataclass(frozen=True)
class DebianArchive:
    """How `debootstrap:<suite>` bases are made (matrix.toml [debian]): see kernellab.image.debian."""

    mirror: str = "http://deb.debian.org/debian"
    components: tuple[str, ...] = ("main",)
    source_date_epoch: int = 0


@dataclass(frozen=True)
class Cuda:
    version: str
    full: str
    min_driver: str
    mvc_driver: str | None
    max_gcc: int
    max_clang: int
    archs: tuple[str, ...]
    images: dict[str, BaseImage]
    pip: str | None = None
    pip_home: str | None = None
    deleted: str | None = None
    debian: DebianToolkit | None = None
    nsys_nvidia: str | None = None     # the Nsight Systems this toolkit ships (NVIDIA's apt package nsight-systems-<it>)

    @property
    def variant(self) -> str:
        """The torch wheel variant name for this toolkit, e.g. cu121."""
        return "cu" + self.version.replace(".", "")


@dataclass(frozen=True)
class Torch:
    version: str
    variants: tuple[str, ...]
    python: tuple[str, str]
    triton: str | None
    pypi_default: str
    archs: dict[str, tuple[str, ...]] = field(default_factory=dict)       # CUDA variant -> its wheels' arch list
    arch_sources: dict[str, str] = field(default_factory=dict)            # CUDA variant -> where that list is from
    numpy: str = ""           # a constraint on numpy for its wheels ("<2": built against NumPy 1)

    def supports_python(self, py: str) -> bool:
        return vkey(self.python[0]) <= vkey(py) <= vkey(self.python[1])


@dataclass(frozen=True)
class Os:
    key: str
    image: str
    family: str
    codename: str
    python: str
    python_ppa: tuple[str, ...]
    gcc_default: int
    gcc: tuple[int, ...]
    llvm: tuple[str, ...]
    llvm_apt: tuple[str, ...]

    @property
    def pythons(self) -> tuple[str, ...]:
        return tuple(sorted({self.python, *self.python_ppa}, key=vkey))

    @property
    def llvms(self) -> tuple[str, ...]:
        return tuple(sorted({*self.llvm, *self.llvm_apt}, key=vkey))


@dataclass(frozen=True)
class Extra:
    """An optional part of an image (matrix.toml `[extra.NAME]`): a target opts in with `extras = ["NAME"]`."""

    name: str
    description: str
    pip: tuple[str, ...]


@dataclass(frozen=True)
class Matrix:
    gpus: dict[str, Gpu]
    cuda: dict[str, Cuda]
    torch: dict[str, Torch]
    llvm: dict[str, str]  # version -> max CUDA as clang-CUDA
    os: dict[str, Os]
    torch_index: str
    image_pip: tuple[str, ...]
    image_apt: tuple[str, ...]
    targets: dict[str, Target]
    extras: dict[str, Extra] = field(default_factory=dict)
    pip_as_of: str = ""                # the pip that resolves as of a date ([image] pip_as_of)
    pip_as_of_python: str = ""         # the oldest Python that pip runs on
    undated: tuple[str, ...] = ()      # image packages installed without a target's date ([image] undated)
    debian: DebianArchive = DebianArchive()
    #: arch-specific and family variants ("9.0a", "10.0f") -> the oldest CUDA that builds them
    arch_specific: dict[str, str] = field(default_factory=dict)
    #: Nsight Systems release line ("2023.4") -> the newest CUDA it traces ([nsys]; kernellab.image.nsys)
    nsys_lines: dict[str, str] = field(default_factory=dict)

    def gpu(self, name: str) -> Gpu | None:
        n = name.strip().lower()
        for g in self.gpus.values():
            if n == g.key or n in g.aliases:
                return g
        return None


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing; restore it from git (`git checkout -- {path.name}`).") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML ({e}); fix that line.") from None


def _need(table: dict[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise ConfigError(f"{where} has no `{key}`; add it to docker/matrix.toml.")
    return table[key]


#: Which GPUs each published PyTorch wheel runs on (its architecture list), one row per release and CUDA variant.
WHEELS = "wheels.toml"
_ARCH_ENTRY = re.compile(r"\d+\.\d+[af]?(\+PTX)?")


def _with_wheels(torch: dict[str, Torch], path: Path) -> dict[str, Torch]:
    """Every release's CUDA variants with the architecture list its wheels were built for, from wheels.toml; a
    variant without a row (or a row with no source) is refused: an unknown list would accept any GPU."""
    rows = _read(path).get("wheels", {})
    out = {}
    for version, t in torch.items():
        mine = rows.get(version, {})
        for variant, row in mine.items():
            where = f'{path.name} [wheels."{version}"] {variant}'
            if variant not in t.variants:
                raise ConfigError(f"{where}: {variant} is not a published variant of torch {version} "
                                  f"({', '.join(t.variants)} in matrix.toml).")
            archs = str(row.get("archs", "")).split(";")
            if not all(_ARCH_ENTRY.fullmatch(a) for a in archs) or "+PTX" in "".join(archs[:-1]):
                raise ConfigError(f'{where}: archs must be TORCH_CUDA_ARCH_LIST entries such as "8.0;9.0+PTX" (PTX on '
                                  f"the last only), not {row.get('archs')!r}.")
            if not str(row.get("source", "")).strip():
                raise ConfigError(f"{where}: every row names its source (a build script at a tag, an issue).")
        missing = [v for v in t.variants if v.startswith("cu") and v not in mine]
        if missing:
            raise ConfigError(f'{path.name} has no architecture list for torch {version} {", ".join(missing)}; add '
                              f'[wheels."{version}"] rows with their sources.')
        out[version] = dataclasses.replace(t, archs={v: tuple(r["archs"].split(";")) for v, r in mine.items()},
                                           arch_sources={v: str(r["source"]) for v, r in mine.items()})
    return out


@functools.lru_cache(maxsize=4)
def load(docker_dir: Path = DOCKER_DIR) -> Matrix:
    """Read matrix.toml and targets.toml from docker_dir, checking every entry."""
    raw = _read(docker_dir / "matrix.toml")
    gpus = {
        k: Gpu(k, _need(v, "name", f"[gpu.{k}]"), str(_need(v, "cc", f"[gpu.{k}]")),
               tuple(a.lower() for a in v.get("aliases", [])))
        for k, v in raw.get("gpu", {}).items()
    }
    cuda = {}
    for k, v in raw.get("cuda", {}).items():
        where = f'[cuda."{k}"]'
        images = {os_key: BaseImage(i["tag"], i.get("cudnn", "")) for os_key, i in v.get("images", {}).items()}
        deb = v.get("debian")
        debian = DebianToolkit(str(_need(deb, "os", f"{where[:-1]}.debian]")), str(_need(deb, "package", f"{where[:-1]}"
                               f".debian]")), str(deb["nsys"]) if deb.get("nsys") else None) if deb else None
        cuda[k] = Cuda(
            version=k, full=_need(v, "full", where), min_driver=_need(v, "min_driver", where),
            mvc_driver=v.get("mvc_driver"), max_gcc=int(_need(v, "max_gcc", where)),
            max_clang=int(v.get("max_clang", 0)), archs=tuple(_need(v, "archs", where)), images=images,
            pip=v.get("pip"), pip_home=v.get("pip_home"), deleted=v.get("deleted"), debian=debian,
            nsys_nvidia=str(v["nsys_nvidia"]) if v.get("nsys_nvidia") else None,
        )
    torch = {}
    for k, v in raw.get("torch", {}).items():
        where = f'[torch."{k}"]'
        py = _need(v, "python", where)
        if len(py) != 2:
            raise ConfigError(f"{where} python must be [oldest, newest].")
        torch[k] = Torch(
            version=k, variants=tuple(_need(v, "variants", where)), python=(py[0], py[1]),
            triton=v.get("triton"), pypi_default=_need(v, "pypi_default", where),
            numpy=str(v.get("numpy", "")),
        )
    torch = _with_wheels(torch, docker_dir / WHEELS)
    llvm = {str(k): str(v["max_cuda"]) for k, v in raw.get("llvm", {}).items()}
    oses = {}
    for k, v in raw.get("os", {}).items():
        where = f'[os."{k}"]'
        oses[k] = Os(
            key=k, image=_need(v, "image", where), family=_need(v, "family", where),
            codename=_need(v, "codename", where), python=_need(v, "python", where),
            python_ppa=tuple(v.get("python_ppa", [])), gcc_default=int(_need(v, "gcc_default", where)),
            gcc=tuple(int(g) for g in _need(v, "gcc", where)), llvm=tuple(v.get("llvm", [])),
            llvm_apt=tuple(v.get("llvm_apt", [])),
        )
    for c in cuda.values():
        for os_key in c.images:
            if os_key not in oses:
                raise ConfigError(f'[cuda."{c.version}".images] names OS "{os_key}", which has no [os."{os_key}"] table.')
        if c.debian and c.debian.os not in oses:
            raise ConfigError(f'[cuda."{c.version}".debian] names OS "{c.debian.os}", which has no [os."{c.debian.os}"] table.')
    deb = raw.get("debian", {})
    archive = DebianArchive(mirror=str(deb.get("mirror", DebianArchive.mirror)),
                            components=tuple(deb.get("components", DebianArchive.components)),
                            source_date_epoch=int(deb.get("source_date_epoch", 0)))
    image = raw.get("image", {})
    extras = {}
    for k, v in raw.get("extra", {}).items():
        pip = _need(v, "pip", f"[extra.{k}]")
        if not isinstance(pip, list) or not pip or not all(isinstance(p, str) for p in pip):
            raise ConfigError(f'[extra.{k}] pip must be a non-empty list of requirements such as pip = ["jupyterlab"].')
        extras[k] = Extra(k, str(v.get("description", "")), tuple(pip))
    arch_specific = {}
    for variant, min_cuda in raw.get("arch_specific", {}).items():
        if not re.fullmatch(r"\d+\.\d+[af]", variant) or not re.fullmatch(r"\d+\.\d+", str(min_cuda)):
            raise ConfigError(f'[arch_specific] "{variant}" = "{min_cuda}": want "X.Ya" or "X.Yf" = "CUDA X.Y".')
        arch_specific[variant] = str(min_cuda)
    nsys_lines = nsys.read_lines(raw.get("nsys", {}))
    nsys.check(nsys_lines, {**{f'[cuda."{c.version}"] nsys_nvidia': c.nsys_nvidia for c in cuda.values() if c.nsys_nvidia},
                            **{f'[cuda."{c.version}".debian] nsys': c.debian.nsys for c in cuda.values()
                               if c.debian and c.debian.nsys}}, vkey)
    targets = {name: parse_target(name, t) for name, t in _read(docker_dir / "targets.toml").get("target", {}).items()}
    return Matrix(
        gpus=gpus, cuda=cuda, torch=torch, llvm=llvm, os=oses,
        torch_index=raw.get("index", {}).get("torch", ""),
        image_pip=tuple(image.get("pip", [])), image_apt=tuple(image.get("apt", [])),
        pip_as_of=image.get("pip_as_of", ""), pip_as_of_python=image.get("pip_as_of_python", ""), undated=tuple(image.get("undated", [])),
        targets=targets, extras=extras, debian=archive, arch_specific=arch_specific, nsys_lines=nsys_lines,
    )
