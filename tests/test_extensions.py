"""Real builds through kernellab.ops.extensions (C++ only, no GPU): errors a user can read, and the cache.

The sources include no torch headers, so each build takes a second or two.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install torch, or use a kernellab image)")

from kernellab import ROOT
from kernellab.errors import ExtensionError  # noqa: E402
from kernellab.ops import extensions, library  # noqa: E402
from kernellab.ops.extensions import kernel_library  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_compile_error_shows_the_compilers_message_with_file_and_line(tmp_path: Path) -> None:
    src = write(tmp_path / "src", "broken.cpp", """\
        int answer() {
          return forty_two;
        }
        """)
    with pytest.raises(ExtensionError) as info:
        extensions.build("kl_test_broken", [src], cuda=False)
    message = str(info.value)
    assert message.startswith("kl_test_broken does not compile:")
    assert re.search(rf"{re.escape(str(src))}:2:10: error: .forty_two. was not declared", message)
    assert "-MMD" not in message and "Traceback" not in message and "ninja: build stopped" not in message
    assert "full log:" in message


def test_a_symbol_no_source_defines_is_named_demangled_at_load(tmp_path: Path) -> None:
    src = write(tmp_path / "src", "binding.cpp", """\
        namespace kl { int launch_thing(const float* x, int n); }
        int call_it() { float x = 0; return kl::launch_thing(&x, 1); }
        """)
    with pytest.raises(ExtensionError, match=r"nothing defines `kl::launch_thing\(float const\*, int\)`"):
        extensions.build("kl_test_undefined", [src], cuda=False)


BUILD_ONE = """
import json, sys
from pathlib import Path
from kernellab.ops import extensions
b = extensions.build("kl_test_cache", [Path(p) for p in sys.argv[1:]], cuda=False)
print(json.dumps({"compiled": b.compiled, "dir": str(b.directory), "seconds": b.seconds}))
"""


def build_in_fresh_process(sources: list[Path]) -> tuple[dict, str]:
    """Each rerun of the inner loop is a new process (pytest); in-process reloads behave differently."""
    import json

    done = subprocess.run([sys.executable, "-c", BUILD_ONE, *map(str, sources)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result, (Path(result["dir"]) / "build.log").read_text()


def test_unchanged_rerun_compiles_nothing_and_an_edit_recompiles_only_that_file(tmp_path: Path) -> None:
    kernel = write(tmp_path / "src", "kernel.cpp", "int kernel_value() { return 1; }\n")
    binding = write(tmp_path / "src", "binding.cpp", "int kernel_value();\nint bound() { return kernel_value(); }\n")

    first, first_log = build_in_fresh_process([kernel, binding])
    assert first["compiled"]
    assert "kernel.cpp" in first_log and "binding.cpp" in first_log

    again, _ = build_in_fresh_process([kernel, binding])
    assert not again["compiled"]
    assert again["dir"] == first["dir"]

    kernel.write_text("int kernel_value() { return 2; }\n")
    edited, edited_log = build_in_fresh_process([kernel, binding])
    assert edited["compiled"]
    assert edited["dir"] == first["dir"]  # the folder is keyed by paths and flags, not contents
    assert "-c " + str(kernel) in edited_log
    assert "binding.cpp -o" not in edited_log


BROKEN = "int answer() {\n  return forty_two;\n}\n"
FIXED = "int answer() {\n  return 42;\n}\n"

BUILD_OR_FAIL = """
import json, sys
from pathlib import Path
from kernellab.ops import extensions
from kernellab.errors import ExtensionError
try:
    b = extensions.build(sys.argv[1], [Path(p) for p in sys.argv[2:]], cuda=False)
    print(json.dumps({"compiled": b.compiled, "error": None}))
except ExtensionError as e:
    print(json.dumps({"compiled": None, "error": str(e)}))
"""


def build_or_fail_in_fresh_process(name: str, sources: list[Path]) -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", BUILD_OR_FAIL, name, *map(str, sources)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_failed_build_raises_the_compilers_error_again_never_a_missing_library(tmp_path: Path) -> None:
    src = write(tmp_path / "src", "answer.cpp", BROKEN)
    messages = []
    for _ in range(3):
        with pytest.raises(ExtensionError) as info:
            extensions.build("kl_test_again", [src], cuda=False)
        messages.append(str(info.value))
    assert messages[0].startswith("kl_test_again does not compile:") and "forty_two" in messages[0]
    assert messages[1] == messages[0] and messages[2] == messages[0]
    assert "shared object" not in " ".join(messages)


def test_a_second_process_gets_the_same_error_without_compiling_until_the_sources_change(tmp_path: Path) -> None:
    src = write(tmp_path / "src", "answer.cpp", BROKEN)
    with pytest.raises(ExtensionError) as info:
        extensions.build("kl_test_record", [src], cuda=False)
    log = extensions.build_directory("kl_test_record", [src], cuda=False) / "build.log"
    before = (log.stat().st_mtime_ns, log.read_text())

    again = build_or_fail_in_fresh_process("kl_test_record", [src])
    assert again["error"] == str(info.value)
    assert (log.stat().st_mtime_ns, log.read_text()) == before  # nothing was compiled to say so

    src.write_text(FIXED)
    fixed = build_or_fail_in_fresh_process("kl_test_record", [src])
    assert fixed == {"compiled": True, "error": None}
    assert not (log.parent / extensions.FAILURE_RECORD).exists()


def test_fixing_only_a_header_rebuilds_in_the_same_process(tmp_path: Path) -> None:
    # torch hashes the listed sources only: after a failure it would skip the build and load nothing.
    header = write(tmp_path / "src", "answer.h", "#define ANSWER forty_two\n")
    src = write(tmp_path / "src", "answer.cpp", '#include "answer.h"\nint answer() { return ANSWER; }\n')
    with pytest.raises(ExtensionError, match="forty_two"):
        extensions.build("kl_test_header", [src], cuda=False)
    header.write_text("#define ANSWER 42\n")
    built = extensions.build("kl_test_header", [src], cuda=False)
    assert built.compiled and built.library.exists()


def test_every_load_of_an_op_that_does_not_compile_shows_the_compilers_error(tmp_path: Path) -> None:
    folder = tmp_path / "kernels" / "broken_cpu"
    write(folder, "op.toml", """\
        description = "a CPU op with a syntax error"
        kind = "cpu"
        dtypes = ["float32"]
        bytes = "2 * n * itemsize"
        flops = "n"
        test_shapes = [{ n = 4 }]
        bench_shapes = [{ n = 4 }]
        """)
    write(folder, "reference.py", "def reference(x):\n    return x\n")
    write(folder, "broken.cpp", "int broken( {\n")
    spec = library.parse_spec(folder / "op.toml")
    for _ in range(2):  # one test after another, in one pytest process
        with pytest.raises(ExtensionError) as info:
            library.load(spec)
        message = str(info.value)
        assert message.startswith("kernellab_broken_cpu does not compile:")
        assert re.search(r"broken\.cpp:1:\d+: error:", message) and "shared object" not in message


def test_build_folder_is_keyed_by_sources_and_lives_in_the_cache(tmp_path: Path, cache: Path) -> None:
    a = write(tmp_path, "a.cpp", "")
    b = write(tmp_path, "b.cpp", "")
    one = extensions.build_directory("kl_x", [a], cuda=False)
    assert one.parent == cache / "torch_extensions"
    assert one == extensions.build_directory("kl_x", [a], cuda=False)
    assert one != extensions.build_directory("kl_x", [a, b], cuda=False)


def test_arch_list_comes_from_the_environment_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
    assert extensions.arch_list() == "8.0;9.0+PTX"


def test_max_jobs_is_at_least_one_and_at_most_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert 1 <= extensions.max_jobs() <= cores


TORCH_NINJA = """\
ninja_required_version = 1.3
cxx = c++
nvcc = /usr/local/cuda/bin/nvcc

cuda_cflags = -DTORCH_EXTENSION_NAME=kl_x -gencode=arch=compute_90,code=sm_90
cuda_post_cflags = --compiler-options '-fPIC'
ldflags = -shared

rule cuda_compile
  command = $nvcc  $cuda_cflags -c $in -o $out $cuda_post_cflags

rule link
  command = $cxx $in $ldflags -o $out

build a.cuda.o: cuda_compile /src/a.cu
build b.cuda.o: cuda_compile /src/b.cu

build kl_x.so: link a.cuda.o b.cuda.o

default kl_x.so
"""


def test_the_kernels_ninja_file_keeps_torchs_compile_and_links_the_objects_against_cudart_alone() -> None:
    made = extensions.kernels_ninja(TORCH_NINJA, "libkl_x_kernels.so", ["-L/cuda/lib64", "-lcudart"])
    assert made is not None
    for kept in ("cuda_cflags = -DTORCH_EXTENSION_NAME=kl_x -gencode=arch=compute_90,code=sm_90",
                 "  command = $nvcc  $cuda_cflags -c $in -o $out $cuda_post_cflags",
                 "build a.cuda.o: cuda_compile /src/a.cu", "build b.cuda.o: cuda_compile /src/b.cu"):
        assert kept in made.splitlines(), kept
    assert "kernel_ldflags = -shared -L/cuda/lib64 -lcudart" in made
    assert "build libkl_x_kernels.so: kernel_link a.cuda.o b.cuda.o" in made
    assert "default libkl_x_kernels.so" in made and "kl_x.so: link" not in made and "default kl_x.so" not in made
    assert made.startswith("builddir = kernels-ninja\n"), "its own .ninja_log, apart from torch's"
    assert extensions.kernels_ninja(TORCH_NINJA.replace("cuda_compile /src", "compile /src"), "x.so", []) is None


def test_a_cu_that_reaches_torchs_headers_stays_in_one_library_with_the_binding(tmp_path: Path) -> None:
    common = tmp_path / "common"
    write(common, "plain.cuh", "#include <cuda_runtime.h>\n")
    write(common, "uses_torch.cuh", "#include <ATen/ATen.h>\n")
    plain = write(tmp_path / "op", "a.cu", '#include "plain.cuh"\n')
    indirect = write(tmp_path / "op", "b.cu", '#include "uses_torch.cuh"\n')
    direct = write(tmp_path / "op", "c.cu", "#include <torch/extension.h>\n")
    assert not extensions.reaches_torch([plain], [common])
    assert extensions.reaches_torch([indirect], [common]) and extensions.reaches_torch([direct], [common])
    assert extensions.reaches_torch([plain, direct], [common])


def _toolkit() -> Path | None:
    """The CUDA toolkit of the nvcc on PATH (which may be a wrapper script): nvcc's own TOP."""
    try:
        out = subprocess.run(["nvcc", "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^#\$ TOP=(.+)$", out.stderr, re.MULTILINE)
    return Path(m.group(1)).resolve() if m else None


TOOLKIT = _toolkit()


@pytest.mark.skipif(TOOLKIT is None, reason="no nvcc on this machine")
def test_the_kernels_library_compiles_with_torchs_nvcc_command_and_a_compile_error_reads_as_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A CPU build of torch has no CUDA_HOME; the machine's toolkit stands in for the one a CUDA build finds.
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(TOOLKIT))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    monkeypatch.setenv("TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES", "1")
    src = write(tmp_path / "src", "k.cu", """\
        __global__ void twice(float* x) { x[threadIdx.x] *= 2.f; }
        void launch_twice(float* x) { twice<<<1, 32>>>(x); }
        """)
    folder = tmp_path / "build"
    folder.mkdir()
    library = kernel_library._kernel_library("kl_split", [src], [], folder)
    assert library == folder / "libkl_split_kernels.so" and library.is_file()
    assert "cuda_compile" in (folder / extensions.KERNELS_NINJA).read_text()
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
    assert "libcudart" in needed and "torch" not in needed and "c10" not in needed, needed
    assert (folder / "kernels-ninja" / ".ninja_log").is_file() and not (folder / ".ninja_log").exists()
    src.write_text("__global__ void twice(float* x) { x[threadIdx.x] *= two; }\n")
    with pytest.raises(RuntimeError, match=r"^Error building extension 'kl_split'"):  # a compile error
        kernel_library._kernel_library("kl_split", [src], [], folder)
    # ninja itself failing (here: a file it cannot read) is not a compile error, so it is not remembered as one.
    monkeypatch.setattr(kernel_library, "kernels_ninja", lambda *a: "this is not ninja\n")
    with pytest.raises(RuntimeError, match=r"^kl_split: ninja could not build its kernels' library: .*ninja: error"):
        kernel_library._kernel_library("kl_split", [src], [], folder)


def test_a_compiler_that_crashed_is_not_remembered_as_the_sources_error(tmp_path: Path) -> None:
    # CI once met Debian's nvcc 12.4 segfaulting on a source it compiles every other time: the next run must compile
    # again, not repeat that failure from failure.json.
    from kernellab.errors import ExtensionError as Failed
    from kernellab.ops.extensions import failures

    folder = tmp_path / "build"
    folder.mkdir()
    crash = RuntimeError("Error building extension 'kl_test_crash'")
    failures._remember_failure(folder, "fp", Failed("kl_test_crash does not compile: Segmentation fault"), crash,
                               "FAILED: [code=255] a.cuda.o\nSegmentation fault\nllc: Unknown command line argument\n")
    assert failures._known_failure(folder, "fp") is None and not (folder / failures.FAILURE_RECORD).exists()
    failures._remember_failure(folder, "fp", Failed("kl_test_crash does not compile: x"), crash, "error: x undeclared\n")
    assert failures._known_failure(folder, "fp") == "kl_test_crash does not compile: x"


@pytest.fixture
def crashes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CXX: a g++ that segfaults on its first compile (as Debian's nvcc 12.4 once did in CI) and is the real one after
    that. Returns the file its crash leaves behind."""
    real = subprocess.run(["sh", "-c", "command -v g++"], capture_output=True, text=True).stdout.strip()
    if not real:
        pytest.skip("no g++ on this machine")
    bin_dir, marker = tmp_path / "bin", tmp_path / "crashed-once"
    write(bin_dir, "g++", f"""\
        #!/bin/sh
        case " $* " in *" -c "*) if [ ! -e {marker} ]; then touch {marker}; echo "Segmentation fault" >&2; exit 139; fi;; esac
        exec {real} "$@"
        """).chmod(0o755)
    monkeypatch.setenv("CXX", str(bin_dir / "g++"))
    return marker


def test_a_compiler_that_crashes_once_is_run_again_and_the_build_succeeds(tmp_path: Path, crashes_once: Path) -> None:
    # A real build through torch's ninja whose compiler crashes once: the build compiles again at once and loads.
    src = write(tmp_path / "src", "fine.cpp", "int answer() { return 42; }\n")
    built = extensions.build("kl_test_crash_once", [src], cuda=False)
    assert crashes_once.exists(), "the compiler never crashed: the test did not test the retry"
    assert built.library.exists() and built.compiled


def test_a_real_error_after_a_crash_is_the_one_explained_and_remembered(tmp_path: Path, crashes_once: Path) -> None:
    # The compiler crashes, then the second try meets the sources' own error: that error is the message, without the
    # crash's lines, and it is kept in failure.json (the crash alone would not be).
    src = write(tmp_path / "src", "broken.cpp", "int answer() { return forty_two; }\n")
    with pytest.raises(ExtensionError) as info:
        extensions.build("kl_test_crash_then_error", [src], cuda=False)
    message = str(info.value)
    assert crashes_once.exists() and "forty_two" in message and "Segmentation fault" not in message
    records = list((tmp_path / "cache").rglob("failure.json"))
    assert len(records) == 1 and "forty_two" in records[0].read_text()
