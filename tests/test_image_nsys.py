"""Nsight Systems in the images, without an engine: the matrix's facts, the spec, the Dockerfiles, the locks.

(tests/test_debian_docker.py builds cu124-debian and runs its nsys; the run side's tests are tests/test_nsys*.py.)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernellab.errors import ConfigError, ResolveError
from kernellab.image import locks, nsys, render, targets
from kernellab.image.resolve import resolve
from kernellab.image.spec import BaseFacts
from kernellab.image.target_table import parse_target

ROOT = Path(__file__).resolve().parents[1]
M = targets.load()


def refuse(**kw) -> str:
    with pytest.raises(ResolveError) as e:
        resolve(M, **kw)
    assert "\n" not in str(e.value), "a refusal is one sentence"
    return str(e.value)


@pytest.mark.parametrize("version, cuda", [
    ("2023.4.4.54-234433681190v0", "12.4"),      # NVIDIA's package version
    ("2025.3.1.90", "13.0"),                     # `nsys --version`'s
    ("2023.4.4.54~12.4.1-2", "12.4"),            # Debian's
    ("2020.4.3.7~11.2.2-3+deb11u3", "11.2"),
    ("2022.4.2.1~11.8.0-5~deb12u1", "11.8"),
    ("2024.5.1", "12.6"),                        # between two lines: the highest at or below it
    ("2023.2.3", "12.1"),
    ("2027.1.0", "13.0"),                        # newer than every line: the newest line's
    ("2019.5.2", None),                          # older than every line
    ("not a version", None),
])
def test_nsys_traces_the_cuda_of_the_highest_release_line_at_or_below_it(version, cuda):
    assert nsys.nsys_traces(M, version) == cuda


def test_an_nsys_sits_in_one_prefix_named_by_its_release():
    assert nsys.release("2023.4.4.54~12.4.1-2") == "2023.4.4" and nsys.release("2025.1.3") == "2025.1.3"
    assert nsys.home("2022.4.2.1~11.8.0-5~deb12u1") == "/opt/nvidia/nsight-systems/2022.4.2"


def test_the_matrix_knows_which_cuda_each_release_line_traces():
    assert M.nsys_lines["2023.4"] == "12.4" and M.nsys_lines["2020.4"] == "11.2" and M.nsys_lines["2025.3"] == "13.0"
    # Every pin traces its own CUDA (checked at load): never older than the toolkit it is for.
    for c in M.cuda.values():
        for pin in (c.nsys_nvidia, c.debian.nsys if c.debian else None):
            if pin:
                assert targets.vkey(str(nsys.nsys_traces(M, pin))) >= targets.vkey(c.version), (c.version, pin)


def _matrix_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "docker" / "matrix.toml").read_text()
    assert old in text
    (tmp_path / "matrix.toml").write_text(text.replace(old, new, 1))
    shutil.copy(ROOT / "docker" / "wheels.toml", tmp_path / "wheels.toml")
    shutil.copy(ROOT / "docker" / "targets.toml", tmp_path / "targets.toml")
    return tmp_path


@pytest.mark.parametrize("old, new, says", [
    ('"2023.4" = "12.4"', '"2023" = "12.4"', r'\[nsys\] "2023" = \'12.4\' in matrix.toml: want a release line'),
    ('"2023.4" = "12.4"', '"2023.4" = 12.4', r'\[nsys\] "2023.4" = 12.4 in matrix.toml: want'),
    ('nsys_nvidia = "2023.4.4"', 'nsys_nvidia = "2023.1.2"',
     r'\[cuda."12.4"\] nsys_nvidia pins Nsight Systems 2023.1.2, which traces CUDA 12.1 at most'),
    ('nsys = "2020.4.3.7~11.2.2-3+deb11u3"', 'nsys = "2019.6.1"',
     r'\[cuda."11.2".debian\] nsys pins Nsight Systems 2019.6.1, which is older than every release line'),
])
def test_a_malformed_or_too_old_nsys_fact_is_one_sentence(tmp_path, old, new, says):
    folder = _matrix_with(tmp_path, old, new)
    with pytest.raises(ConfigError, match=says) as e:
        targets.load(folder)
    assert "\n" not in str(e.value)


def test_cuda_debian_targets_carry_debians_nsys_of_their_toolkits_release():
    for target, version, home in [("cu124-debian", "2023.4.4.54~12.4.1-2", "/opt/nvidia/nsight-systems/2023.4.4"),
                                  ("cu118-debian", "2022.4.2.1~11.8.0-5~deb12u1", "/opt/nvidia/nsight-systems/2022.4.2"),
                                  ("cu112-debian11", "2020.4.3.7~11.2.2-3+deb11u3",
                                   "/opt/nvidia/nsight-systems/2020.4.3")]:
        s = resolve(M, target=target)
        assert (s.nsys, s.nsys_home) == (version, home)
        assert s.to_dict()["nsys"] == version
        assert f"nsys        {version} in {home}" in s.summary()


def test_cuda_image_targets_carry_the_release_their_cuda_ships():
    assert resolve(M, target="cu124-h100").nsys == "2023.4.4"
    assert resolve(M, target="cu121-a100").nsys == "2023.1.2"
    assert resolve(M, target="cu128-blackwell").nsys == "2024.6.2"
    assert resolve(M, target="tvm07-paper").nsys == "2022.4.2"
    none = resolve(M, cuda="11.6", gpu="a100", torch="1.13.0")
    assert none.nsys is None and "pins no Nsight Systems for CUDA 11.6 (nsys_nvidia)" in none.summary()


def test_images_without_their_own_nsys_keep_their_digests_and_say_whose_it_is():
    pip = resolve(M, target="cu130-pip")
    assert pip.nsys is None and "nsys" not in pip.to_dict()
    assert "nsys        host's, mounted at run time" in pip.summary()
    facts = BaseFacts(python="3.12.3", torch="2.11.0+cu130", torch_cuda="13.0")
    site = resolve(M, base_image="site:gpu", gpu="h100", base_facts=facts)
    assert site.nsys is None and "host's, mounted at run time" in site.summary()
    cpu = resolve(M, target="cpu")
    assert cpu.nsys is None and "nsys" not in cpu.to_dict() and "\n  nsys        -\n" in cpu.summary()


def test_every_committed_lock_was_made_for_the_spec_its_target_resolves_to():
    """A --locked build follows the committed lock only when its spec section is the spec: the CUDA targets' locks
    carry their nsys; cpu, cpu-debian11 and cu130-pip have none, so their specs (and digests) are as they were."""
    for path in sorted(locks.LOCK_DIR.glob("*.json")):
        spec = resolve(M, target=path.stem)
        lock = json.loads(path.read_text())
        assert locks._differs(lock, spec) == [], path.name
        assert ("nsys" in lock["spec"]) == (spec.nsys is not None), path.name


def test_the_debian_locks_pin_what_nsys_importer_needs():
    for target in ("cu124-debian", "cu118-debian", "cu112-debian11"):
        lock = json.loads((locks.LOCK_DIR / f"{target}.json").read_text())
        pins = locks.apt_pins(lock) or []
        assert any(p.startswith("libssh-4=") for p in pins) and any(p.startswith("libpfm4=") for p in pins), target
        assert "libssh-4=" in render.dockerfile(resolve(M, target=target), M, locked=True, apt_pins=pins)


def test_nsys_false_leaves_it_out_and_is_part_of_the_digest():
    t = parse_target("x", {"cuda": "12.4", "toolkit": "debian", "gpu": ["h100"], "nsys": False})
    assert t.nsys is False
    with pytest.raises(ConfigError, match=r"`nsys` must be true or false, not str 'no'"):
        parse_target("x", {"nsys": "no"})
    on, off = resolve(M, target="cu124-debian"), resolve(M, target="cu124-debian", nsys=False)
    assert off.nsys is None and off.digest != on.digest and "none (nsys = false)" in off.summary()
    text = render.dockerfile(off, M)
    assert "nsight-systems" not in text and "kernellab.nsys" not in text and "libssh-4" not in text
    assert "nsight-systems" not in render.dockerfile(resolve(M, target="cu124-h100", nsys=False), M)


def test_asking_for_nsys_where_the_image_cannot_have_one_is_refused_naming_why():
    assert "cuda-pip image of CUDA 13.0 carries no Nsight Systems of its own (host's, mounted at run time)" in \
        refuse(target="cu130-pip", nsys=True)
    assert "pins no Nsight Systems for CUDA 11.6 (nsys_nvidia)" in refuse(cuda="11.6", gpu="a100", torch="1.13.0",
                                                                         nsys=True)
    assert "a CPU image has no GPU to trace" in refuse(target="cpu", nsys=True)
    assert resolve(M, target="cu124-debian", nsys=True).nsys == "2023.4.4.54~12.4.1-2"


def test_the_cuda_debian_dockerfile_unpacks_debians_nsys_after_the_system_packages(tmp_path):
    s = resolve(M, target="cu124-debian")
    text = render.dockerfile(s, M)
    assert " nvidia-cuda-toolkit=12.4.131~12.4.1-2 libssh-4 libpfm4 " in text, "pinned with the system packages"
    run = "bash /tmp/nsight-systems.sh '2023.4.4.54~12.4.1-2' /opt/nvidia/nsight-systems/2023.4.4 trixie"
    assert run in text and text.index("apt-get install") < text.index(run) < text.index("pip install")
    step = text[text.rindex("RUN", 0, text.index(run)):text.index(run)]
    assert "--mount=type=bind,source=nsight-systems.sh,target=/tmp/nsight-systems.sh" in step
    assert "id=kl-apt-cache-debian13" in step and "id=kl-apt-lists-debian13" in step
    assert "ENV PATH=/opt/nvidia/nsight-systems/2023.4.4/bin:$PATH" in text
    assert 'kernellab.nsys="2023.4.4.54~12.4.1-2"' in text
    render.write_context(s, M, tmp_path)
    assert (tmp_path / "nsight-systems.sh").read_bytes() == (ROOT / "docker" / "nsight-systems.sh").read_bytes()
    assert "nsight-systems.sh" in render.context_files(s)
    committed = ROOT / "docker" / "rendered" / "cu124-debian" / "nsight-systems.sh"
    assert committed.read_bytes() == (ROOT / "docker" / "nsight-systems.sh").read_bytes(), "the folder builds by hand"


def test_the_cuda_image_dockerfile_installs_nvidias_package_of_that_release():
    text = render.dockerfile(resolve(M, target="cu124-h100"), M)
    assert "apt-get install -y --no-install-recommends nsight-systems-2023.4.4 \\" in text
    assert "&& /opt/nvidia/nsight-systems/2023.4.4/bin/nsys --version" in text
    assert "ENV PATH=/opt/nvidia/nsight-systems/2023.4.4/bin:$PATH" in text and 'kernellab.nsys="2023.4.4"' in text
    assert text.index("nsight-systems-2023.4.4") < text.index("pip install")


def test_images_without_nsys_render_as_before():
    for target in ("cpu", "cpu-debian11", "cu130-pip"):
        text = render.dockerfile(resolve(M, target=target), M)
        assert "nsight-systems" not in text and "kernellab.nsys" not in text, target
        assert "nsight-systems.sh" not in render.context_files(resolve(M, target=target))
