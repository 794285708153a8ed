"""kernellab.ops.extensions without a compiler run: which .cu objects a header change makes stale, and which
options an nvcc has (a stand-in nvcc script that prints a help text)."""
from __future__ import annotations

import json
import stat
from pathlib import Path

from kernellab.ops import extensions


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def kernels(tmp_path: Path) -> tuple[list[Path], list[Path], Path]:
    common = tmp_path / "common"
    write(common / "shared.cuh", '#pragma once\n#include "deeper.cuh"\n')
    write(common / "deeper.cuh", "#define DEPTH 1\n")
    op = tmp_path / "op"
    a = write(op / "a.cu", '#include "shared.cuh"\n#include "a.h"\n#include <cuda_runtime.h>\n')
    write(op / "a.h", "void a();\n")
    b = write(op / "b.cu", "#include <cuda_runtime.h>\n")
    binding = write(op / "binding.cpp", '#include "a.h"\n')
    build = tmp_path / "build"
    build.mkdir()
    for name in ("a.cuda.o", "b.cuda.o", "binding.o"):
        (build / name).write_bytes(b"obj")
    return [a, b, binding], [common], build


def test_only_cu_sources_are_tracked_and_a_source_edit_alone_is_left_to_ninja(tmp_path: Path) -> None:
    sources, dirs, build = kernels(tmp_path)
    headers = extensions.cuda_headers(sources, dirs)
    assert set(headers) == {"a.cuda.o", "b.cuda.o"}  # binding.cpp: g++ writes its own dependency file
    (build / extensions.HEADERS_RECORD).write_text(json.dumps(headers))
    sources[0].write_text(sources[0].read_text() + "// an edit of the source itself\n")
    assert extensions.cuda_headers(sources, dirs) == headers
    assert extensions.forget_stale_objects(build, headers) == []
    assert (build / "a.cuda.o").exists()


def test_a_changed_header_anywhere_below_removes_only_the_objects_that_include_it(tmp_path: Path) -> None:
    sources, dirs, build = kernels(tmp_path)
    (build / extensions.HEADERS_RECORD).write_text(json.dumps(extensions.cuda_headers(sources, dirs)))
    write(dirs[0] / "deeper.cuh", "#define DEPTH 2\n")  # included by shared.cuh, included by a.cu
    removed = extensions.forget_stale_objects(build, extensions.cuda_headers(sources, dirs))
    assert removed == ["a.cuda.o"]
    assert not (build / "a.cuda.o").exists()
    assert (build / "b.cuda.o").exists() and (build / "binding.o").exists()


def test_objects_no_record_covers_are_compiled_again(tmp_path: Path) -> None:
    sources, dirs, build = kernels(tmp_path)
    # The first build after an upgrade (no record) or after a broken record: nvcc has written no
    # dependency file that ninja could trust.
    assert extensions.forget_stale_objects(build, extensions.cuda_headers(sources, dirs)) == ["a.cuda.o", "b.cuda.o"]
    sources2, _, build2 = kernels(tmp_path / "again")
    (build2 / extensions.HEADERS_RECORD).write_text("[not a record")
    assert len(extensions.forget_stale_objects(build2, extensions.cuda_headers(sources2, dirs))) == 2


def test_nvcc_options_come_from_its_help_and_an_nvcc_that_cannot_run_has_none(tmp_path: Path) -> None:
    nvcc = write(tmp_path / "nvcc", "#!/bin/sh\ncat <<'EOF'\n--threads <number>    (-t)\n        Specify ...\n"
                 "--split-compile <number>   (-split-compile)\n--time <file name>\nEOF\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    extensions.nvcc_options.cache_clear()
    options = extensions.nvcc_options(str(nvcc))
    assert {"--threads", "--split-compile", "--time"} <= options
    assert "--split" not in options and "Specify" not in " ".join(options)
    assert extensions.nvcc_options(str(tmp_path / "missing-nvcc")) == frozenset()
