"""Reproducible builds against a real Docker engine: the Debian base made twice, the cpu target built twice
from its lock (the second time as a site builds it, through an authenticating proxy with its own CA), and CUDA
12.4 from Debian's archive compiling every CUDA op for sm_80 and sm_90.

Tier `full` (`make test-all`): every test here builds an image from scratch on purpose: the base made twice
(same ID), the cpu target rebuilt without cache (same packages, same op libraries), cu124-debian (about 11 GB:
its CUDA compiles the ops; its nsys is Debian's 2023.4.4). The paper-era targets (cu118-debian, cu112-debian11) are
tests/test_paper_era_docker.py's.

Locks go to temporary folders, never into docker/locks/. The cu124-debian image is large (Debian's
toolkit, PyTorch 2.6.0 with its CUDA 12.4 wheels); it is built once per session.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from kernellab import engine, proc
from kernellab.container import runner
from kernellab.image import builder, contents, locks, network
from kernellab.image.kinds import debootstrap_cpu
from kernellab.ops import spec
from proxy import Proxy

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.full]
DOCKER = engine.by_name("docker")


def test_the_debian_base_made_twice_is_the_same_image(docker_client):
    tag = debootstrap_cpu.local_tag("bookworm")
    first = builder.make_debootstrap_base("bookworm", out=io.StringIO(), engine=DOCKER)
    first_id = DOCKER.image_id(first)
    again = builder.make_debootstrap_base("bookworm", out=io.StringIO(), engine=DOCKER)
    assert again == tag and DOCKER.image_id(again) == first_id, "same packages, same image ID"
    info = DOCKER.inspect(tag) or {}
    assert info.get("Created", "").startswith("2025-01-01T00:00:00"), "dated at source_date_epoch, not now"


class Twice(NamedTuple):
    """The cpu target built twice from one lock (`cpu_twice`)."""

    first_ref: str
    lock: dict
    second: builder.Built
    relock: dict
    log: str
    proxy: Proxy  # the second build's proxy: its requests
    secret: str  # the proxy's password
    cert: Path  # the extra CA the second build was given
    second_files: dict[str, str]  # contents.read_save of the second image's `docker save`
    saved: tuple[int, bool]  # that save's size in bytes, and whether the secret occurs in it


class _Watched:
    """A binary stream read through, counting its bytes and watching for `needle` across chunk borders."""

    def __init__(self, stream, needle: bytes):
        self.stream, self.needle, self.size, self.found, self.tail = stream, needle, 0, False, b""

    def read(self, n: int = -1) -> bytes:
        chunk = self.stream.read(n)
        self.size += len(chunk)
        self.found = self.found or self.needle in self.tail + chunk
        self.tail = (self.tail + chunk)[-len(self.needle):]
        return chunk


@pytest.fixture(scope="session")
def cpu_twice(docker_client, tmp_path_factory):
    """The cpu target built twice from one lock, the second time without the layer cache: the committed
    lock when it still fits (then the first build is `make`'s, from cache), else one made here first.

    The second build is a site's: through an authenticating HTTP proxy, with an extra CA certificate. So one
    uncached build shows both that a lock rebuilds the same image (all but that CA) and that the proxy's password
    reaches no layer (CI saved a third cpu build, about 150 s, when the proxy build stopped being one of its own)."""
    lock_dir = tmp_path_factory.mktemp("locks")
    spec = builder.resolve_request(target="cpu", engine=DOCKER)
    shutil.copyfile(locks.lock_path(spec), locks.lock_path(spec, lock_dir))
    certs = network.ca_certificates()
    first = builder.build(spec, lock="prefer", lock_dir=lock_dir, ca_certs=certs, out=io.StringIO(), engine=DOCKER)
    if not first.from_lock:  # the committed lock no longer fits this machine's base: one made here
        first = builder.build(spec, lock="strict", lock_dir=lock_dir, ca_certs=certs, out=io.StringIO(), engine=DOCKER)
    lock = json.loads(first.lock_file.read_text())
    first_ref = f"kernellab-test/repro:first-{first.image_id[7:19]}"
    DOCKER.tag(first.image_id, first_ref)
    site = tmp_path_factory.mktemp("site")
    cert = site / "test-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=kernellab test CA", "-keyout", str(site / "k.pem"), "-out", str(cert)],
                   check=True, capture_output=True)
    secret = "s3cr3t-kl-proxy"
    log = io.StringIO()
    with Proxy("kluser", secret) as proxy, pytest.MonkeyPatch.context() as mp:
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            mp.setenv(var, f"http://kluser:{secret}@127.0.0.1:{proxy.port}")
        # kernellab:cpu stays on the first: the cluster tests run it beside this module (.ci/run).
        second = builder.build(spec, lock="strict", no_cache=True, lock_dir=lock_dir, ca_certs=(*certs, cert),
                              out=log, engine=DOCKER, tag_target=False)
    with DOCKER.save([second.image_id]) as stream:  # one read of the save: its files, and the secret looked for
        watched = _Watched(stream, secret.encode())
        second_files = contents.read_save(watched)  # type: ignore[arg-type]
        while watched.read(1 << 24):
            pass
    yield Twice(first_ref, lock, second, json.loads(second.lock_file.read_text()), log.getvalue(), proxy, secret,
                cert, second_files, (watched.size, watched.found))
    # Back as `make` left it: its image keeps the tags, the uncached copy (2.6 GB) goes, so runs do not fill the disk.
    for tag in second.tags:
        DOCKER.tag(first.image_id, tag)
    DOCKER.untag(first_ref)
    if second.image_id != first.image_id:
        DOCKER.remove_image(second.image_id)


def test_the_cpu_target_built_twice_from_its_lock_has_the_same_packages(cpu_twice):
    lock, second, relock, log = cpu_twice.lock, cpu_twice.second, cpu_twice.relock, cpu_twice.log
    assert second.from_lock and "--allow-downgrades" in log and "gcc-12=" in log, "apt installs the pins"
    assert relock["pip_freeze"] == lock["pip_freeze"]
    assert relock["debian"] == lock["debian"] and len(lock["debian"]["image"]) > 100
    assert relock["base"] == lock["base"]
    assert not second.lock_changed, "the same content: the lock file is left as it was"
    assert second.tags == (second.spec.tag,), "tag_target=False: kernellab:cpu stayed on the first build"


def _op_record(image: str, cache: Path, monkeypatch: pytest.MonkeyPatch, *kernels: str) -> dict:
    """Every op built in a container of `image` with a fresh build cache, as `python -m kernellab.ops build --record`
    (`kernels`: "--kernels", "/workspace/DIR" for ops elsewhere in the repository)."""
    monkeypatch.setenv("KERNELLAB_CACHE", str(cache))
    code = runner.run(image, ["python", "-m", "kernellab.ops", "build", "--record", "/cache/record.json", *kernels],
                          gpu=False, engine=DOCKER)
    assert code == 0
    return json.loads((cache / "record.json").read_text())


def test_the_cpu_target_built_twice_builds_the_same_op_libraries(cpu_twice, tmp_path, monkeypatch):
    a = _op_record(cpu_twice.first_ref, tmp_path / "a", monkeypatch)
    b = _op_record(cpu_twice.second.tags[0], tmp_path / "b", monkeypatch)
    built = {name: r for name, r in a.items() if "library_sha256" in r}
    assert built, f"no op was built: {a}"
    for name, r in built.items():
        assert b[name]["library_sha256"] == r["library_sha256"], f"{name}: the two builds made different libraries"


def test_two_builds_from_one_lock_hold_the_same_files_but_pythons_bytecode_and_the_sites_ca(cpu_twice):
    """Docker 20.10 dates every file at build time (so image IDs differ); the contents are what must agree.
    pip writes .pyc files that embed their source file's modification time, which is the install time. The
    second build was given one more CA certificate: it, its links and the trust store holding it differ too."""
    result = contents.compare(contents.files(DOCKER, cpu_twice.first_ref), cpu_twice.second_files)
    assert not result.only_a, result.summary("first", "second")
    ca = [p for p in result.only_b if p.startswith("/usr/local/share/ca-certificates/kernellab/")]
    assert len(ca) == 1 and ca[0].endswith(f"-{cpu_twice.cert.stem}.crt"), result.summary("first", "second")
    links = {p for p in result.only_b if p.startswith("/etc/ssl/certs/")
             and cpu_twice.second_files[p].startswith("symlink")}
    assert len(links) == 2 and set(result.only_b) == {*ca, *links}, result.summary("first", "second")
    other = [p for p in result.differ if not p.endswith(".pyc")]
    assert other == ["/etc/ssl/certs/ca-certificates.crt"], result.summary("first", "second")
    assert result.same > 10_000


def test_proxy_credentials_never_reach_the_image_and_the_ca_is_trusted(cpu_twice):
    """The second build went through an authenticating proxy with an extra CA; the password must appear nowhere."""
    proxy, secret, ref = cpu_twice.proxy, cpu_twice.secret, cpu_twice.second.image_id
    assert any(ok for _, _, ok in proxy.requests), f"the build did not use the proxy: {proxy.requests[:5]}"
    history = subprocess.run(["docker", "history", "--no-trunc", ref], capture_output=True, text=True).stdout
    inspect = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True).stdout
    assert secret not in history and secret not in inspect
    size, found = cpu_twice.saved
    assert size > 10_000_000, f"docker save {ref} gave {size} bytes"
    assert not found, "the proxy's password is in the saved image"
    bundle = DOCKER.read_file(ref, "/etc/ssl/certs/ca-certificates.crt").stdout
    pem = cpu_twice.cert.read_text().strip().splitlines()
    assert pem[1] in bundle, "the extra CA is in the image's trust store"


@pytest.fixture(scope="session")
def cu124_debian(docker_client, tmp_path_factory):
    spec = builder.resolve_request(target="cu124-debian", engine=DOCKER)
    return builder.build(spec, lock_dir=tmp_path_factory.mktemp("locks"), ca_certs=network.ca_certificates(),
                        out=io.StringIO(), engine=DOCKER)


def test_cuda_12_4_from_debian_compiles_every_cuda_op_for_sm80_and_sm90(cu124_debian, tmp_path, monkeypatch):
    built = cu124_debian
    lock = json.loads(built.lock_file.read_text())
    assert lock["versions"]["nvcc"].startswith("12.4.131") and lock["versions"]["torch_cuda"] == "12.4"
    assert any(p.startswith("nvidia-cuda-toolkit=12.4.131") for p in lock["debian"]["image"])
    record = _op_record(built.tags[0], tmp_path / "cache", monkeypatch)
    cuda_ops = [op for op in spec.discover() if op.kind == "cuda"]
    assert cuda_ops
    for op in cuda_ops:
        r = record[op.name]
        if "skipped" in r:
            assert "CUDA 12.4" in r["skipped"], f"{op.name} skipped for another reason: {r['skipped']}"
            continue
        # An op with a candidate that requires sm_90a (matmul's wgmma) gets sm_90a code in place of sm_90.
        want = {"sm_80", "sm_90a" if "9.0a" in op.requires.values() else "sm_90"}
        assert want <= set(r["cubins"]), f"{op.name}: SASS for {r['cubins']} only"
        assert r["sass_sha256"], op.name
    ptxas = list((tmp_path / "cache" / "torch_extensions").glob("kernellab_*/build.log"))
    assert ptxas and any("for 'sm_90'" in p.read_text() for p in ptxas), "ptxas reports are kept in the build logs"


def test_every_row_plan_launches_a_block_its_kernel_takes(cu124_debian, tmp_path, monkeypatch):
    # Host code, no GPU: tests/plans/row_plans.cu runs the row plans (backward and forward) over some 2.2M shapes and
    # checks each against the kernel variant that is launched for it. A handful of rows of 8200 to 16384 fp16 columns
    # once got a block of 1024 threads for a kernel bounded to 512 (a launch failure on the GPU).
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    check = ("nvcc -std=c++17 -I/workspace/kernels/_common -o /tmp/row_plans /workspace/tests/plans/row_plans.cu"
             " && /tmp/row_plans")
    assert runner.run(cu124_debian.tags[0], ["sh", "-c", check], gpu=False, engine=DOCKER) == 0


def test_cu124_debian_carries_debians_nsys_beside_its_report_importer(cu124_debian):
    image, home = cu124_debian.tags[0], "/opt/nvidia/nsight-systems/2023.4.4"
    assert cu124_debian.spec.nsys_home == home and DOCKER.labels(image).get("kernellab.nsys") == cu124_debian.spec.nsys
    version = proc.run(DOCKER.probe_argv(image, ["--version"], entrypoint="nsys"), check=False)
    assert version.ok and "2023.4.4" in version.stdout, version.stdout + version.stderr
    importer = proc.run(DOCKER.probe_argv(image, ["-x", f"{home}/host-linux-x64/QdstrmImporter"], entrypoint="test"),
                        check=False)
    assert importer.ok, "QdstrmImporter sits beside the CLI: nsys profile writes a report, not only a .qdstrm"


def test_a_candidate_that_requires_sm90a_gets_sm90a_code_instead_of_sm90(cu124_debian, tmp_path, monkeypatch):
    # The image's arch list is 8.0;9.0: the fixture's library must hold sm_80 and sm_90a code, no plain sm_90.
    record = _op_record(cu124_debian.tags[0], tmp_path / "cache", monkeypatch, "--kernels", "/workspace/tests/archspecific")
    cubins = set(record["sm90a_fence"]["cubins"])
    assert cubins == {"sm_80", "sm_90a"}, cubins


def test_a_locked_version_the_archive_lost_is_named_and_nothing_is_tagged(cpu_twice, tmp_path):
    lock = cpu_twice.lock
    spec = builder.resolve_request(target="cpu", engine=DOCKER)
    gone = dict(lock, debian=dict(lock["debian"], image=[
        "gcc-12=0.0-kernellab-gone" if p.startswith("gcc-12=") else p for p in lock["debian"]["image"]]))
    (tmp_path / "cpu.json").write_text(json.dumps(gone))
    before = DOCKER.image_id("kernellab:cpu")
    with pytest.raises(builder.PinsGone) as caught:
        builder.build(spec, lock="strict", lock_dir=tmp_path, out=io.StringIO(), engine=DOCKER)
    assert caught.value.missing == ["gcc-12=0.0-kernellab-gone"]
    assert "no longer has: gcc-12=0.0-kernellab-gone;" in str(caught.value) and "\n" not in str(caught.value)
    assert DOCKER.image_id("kernellab:cpu") == before, "the previous image of the tag is kept"
    assert json.loads((tmp_path / "cpu.json").read_text()) == gone, "the lock is left as it was"


#: In the container: build vector_add (a copy under /cache) with kernel_library, as a watch round does; the
#: argument "edit" first appends a line to its .cu. Prints what the test reads.
SPLIT_SCRIPT = r"""
import json, shutil, sys
from pathlib import Path
from kernellab.ops import binaries, library, spec as opspec
work = Path("/cache/ops")
if not work.exists():
    shutil.copytree("/workspace/kernels", work)
if sys.argv[1] == "edit":
    cu = work / "vector_add" / "vector_add.cu"
    cu.write_text(cu.read_text() + "\n// an edit\n")
b = library.build(opspec.parse_spec(work / "vector_add" / "op.toml"), kernel_library=True)
print(json.dumps({"library": str(b.library), "kernels": str(b.kernels), "compiled": b.compiled,
                  "mtimes": [b.library.stat().st_mtime_ns, b.kernels.stat().st_mtime_ns],
                  "cubins": binaries.fingerprint(b.device_code).cubins}))
"""


def test_a_watch_build_puts_the_kernels_in_their_own_library_and_an_edit_relinks_only_that(
        cu124_debian, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "split.py").write_text(SPLIT_SCRIPT)

    def build(step: str) -> dict:
        code = runner.run(cu124_debian.tags[0], ["bash", "-c", f"python /cache/split.py {step} > /cache/out.json"],
                              gpu=False, engine=DOCKER)
        assert code == 0
        return json.loads((tmp_path / "cache" / "out.json").read_text())

    first = build("first")
    library, kernels = Path(first["library"]), Path(first["kernels"])
    assert kernels.name == "libkernellab_vector_add_kernels.so" and kernels.parent == library.parent
    assert {"sm_80", "sm_90"} <= set(first["cubins"]), "the GPU code is in the kernels' library"
    host = tmp_path / "cache" / library.relative_to("/cache")
    needed = subprocess.run(["readelf", "-d", str(host)], capture_output=True, text=True).stdout
    assert f"[{kernels}]" in needed, "the binding's library names the kernels' library by its path"
    needed = subprocess.run(["readelf", "-d", str(host.with_name(kernels.name))], capture_output=True, text=True).stdout
    assert "libcudart" in needed and "torch" not in needed and "c10" not in needed, needed
    edited = build("edit")  # a new process, as each watch round is
    assert edited["compiled"] and edited["mtimes"][0] == first["mtimes"][0], "the binding's library is not relinked"
    assert edited["mtimes"][1] > first["mtimes"][1], "the kernels' library is"


LIGER_WHEEL = "60789cd576af073ab9b192b570d2597fd0cdad489cd62fb44fb16256d43754c9"  # recipes/liger/locks/*.json


def test_the_liger_recipe_builds_in_cu124_debian_with_the_wheel_its_lock_names(cu124_debian, tmp_path, monkeypatch):
    """Build only (no GPU here): the recipe's system is Liger-Kernel 0.8.5 from PyPI, installed by its pip layer; the
    wheel pip installed is the one the committed lock names (sha256). (Importing it needs a GPU: Triton's autotuner
    asks for the active driver at import; the GPU machine runs it.)"""
    from kernellab.recipes import build as recipe_build
    from kernellab.recipes import read

    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "recipes" / "liger"
    shutil.copytree(Path(__file__).resolve().parents[1] / "recipes" / "liger", folder)   # its lock is not rewritten
    recipe = read.load(str(folder))
    built = recipe_build.build(recipe, engine=DOCKER, out=io.StringIO())
    assert recipe_build.wheels_in(recipe, built.image_id, DOCKER) == {
        "liger-kernel": {"version": "0.8.5", "sha256": LIGER_WHEEL}}
    log = tmp_path / "import.txt"
    with open(log, "w") as f:
        code = runner.run(built.image_id, ["python3", "-c", "import importlib.metadata as m; "
                                           "print('liger-kernel', m.version('liger-kernel'))"],
                          gpu=False, out=f, engine=DOCKER)
    assert code == 0 and "liger-kernel 0.8.5" in log.read_text(), log.read_text()
