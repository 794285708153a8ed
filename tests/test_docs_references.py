"""Every reference in the tracked Markdown files points at something that exists.

Fast: no Docker, no network, no GPU. Checked, in every tracked `*.md` (`git ls-files`):

1. Markdown links `[text](target)` and `[text]: target`: a relative target (its `#anchor` dropped) exists
   beside the Markdown file or at the repository root. http(s), mailto and pure anchors are not checked.
2. Repository paths anywhere in the text (prose, code spans, code blocks): a word whose first component is a
   tracked top-level folder (`src/`, `docker/`, `kernels/`, `tests/`, ...) or is a tracked top-level file
   (`tasks.py`, `Makefile`, ...) exists. A code span that is one folder name (`vector_add/`) exists beside the
   Markdown file or at the root.
3. Python references `kernellab.x.y`: the longest prefix that imports is imported, and the rest is an attribute
   chain on it. `src/kernellab/...` paths are covered by 2.

Allowed (not checked), each because it names no file or code that could go stale:
- placeholders: a word containing `<`, `>`, `*`, `{`, `}`, `$`, `...` or `|`, or with a path component in
  capitals (`NAME`, `OP`, `OLD`, `TARGET`, `FP`);
- generated outputs and machine paths: only tracked top-level folders and files count as repository paths, so
  `build/`, `.venv/`, `.devcontainer/`, `bundles/`, `/etc/...` and `~/.cache/...` are never checked;
- in `results/` (reports the benchmark writes, with the machine's paths), only Markdown links are checked;
- image labels and file names that look dotted: `kernellab.<name>` set by a `LABEL` in docker/Dockerfile.j2,
  a name with a `-` (`kernellab.lock-sha256`), or one ending in a file extension (`kernellab.cuh`).

The assertion lists every broken reference as `file:line: reference (why)`.
"""
from __future__ import annotations

import functools
import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
DOTTED = re.compile(r"(?<![\w./-])kernellab(?:\.[A-Za-z_]\w*)+(?![\w-])")
PLACEHOLDER = re.compile(r"[<>*{}$|]|\.\.\.")
CAPITALS = re.compile(r"^[A-Z][A-Z0-9_]+$")
FILE_EXTENSIONS = {"py", "pyi", "toml", "md", "json", "sh", "cu", "cuh", "h", "cpp", "j2", "diff", "patch",
                   "txt", "csv", "png", "yaml", "yml", "gz", "cfg", "ini"}
# Leading and trailing characters a path in prose or a code span may be wrapped in.
WRAPPERS = "`'\"([{,;:)]}!?"


@functools.lru_cache(maxsize=1)
def tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git ls-files failed ({e}): this test needs a git checkout")
    return out.splitlines()


def markdown_files() -> list[str]:
    return [p for p in tracked() if p.endswith(".md") and (ROOT / p).is_file()]


@functools.lru_cache(maxsize=1)
def top_level() -> tuple[frozenset[str], frozenset[str]]:
    """(top-level folders, top-level files) that git tracks."""
    folders = {p.split("/", 1)[0] for p in tracked() if "/" in p}
    files = {p for p in tracked() if "/" not in p}
    return frozenset(folders), frozenset(files)


@functools.lru_cache(maxsize=1)
def image_labels() -> frozenset[str]:
    """`kernellab.<name>` image labels the Dockerfile template sets: documented, but not Python."""
    text = (ROOT / "docker" / "Dockerfile.j2").read_text()
    return frozenset(re.findall(r"\b(kernellab\.[\w-]+)=", text))


def is_placeholder(ref: str) -> bool:
    return bool(PLACEHOLDER.search(ref)) or any(CAPITALS.match(part.split(".")[0]) for part in ref.split("/"))


def path_problem(ref: str, md: Path) -> str | None:
    """Why the path does not resolve beside `md` or at the root, or None. `file.py::test_x` also needs the test."""
    ref, _, test = ref.split("#", 1)[0].partition("::")
    found = next((p for p in (md.parent / ref, ROOT / ref) if p.exists()), None) if ref else md
    if found is None:
        return "no such file or folder"
    name = test.split("::")[-1].split("[")[0]
    if name and not re.search(rf"^\s*(async\s+)?def {re.escape(name)}\(", found.read_text(), re.M):
        return f"{ref} has no test {name}"
    return None


def repo_path(word: str, code: bool) -> str | None:
    """The word as a repository path to check, or None when it is not one (or is an allowed placeholder).

    In prose a `/` is also "or" (`docker/podman`): there only words ending in `/` or a file extension count."""
    word = word.lstrip(WRAPPERS).rstrip(WRAPPERS + ".")
    if word.startswith("./"):
        word = word[2:]
    if not word or "://" in word or is_placeholder(word):
        return None
    folders, files = top_level()
    head, sep, _ = word.partition("/")
    if not sep:
        return word if word in files else None
    if head not in folders:
        return None
    if not code and not (word.endswith("/") or word.split("::")[0].rsplit(".", 1)[-1] in FILE_EXTENSIONS):
        return None
    return word


def dotted_problem(ref: str) -> str | None:
    """Why `kernellab.a.b.c` does not resolve, or None when it does (or is a label or file name)."""
    if ref in image_labels() or ref.rsplit(".", 1)[-1] in FILE_EXTENSIONS:
        return None
    parts = ref.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and not f"{module_name}.".startswith(f"{e.name}."):
                return f"importing {module_name} fails: {e}"  # a dependency is missing, not the module
            continue
        except Exception as e:  # any failure to import is a finding
            return f"importing {module_name} fails: {type(e).__name__}: {e}"
        for i, attr in enumerate(parts[cut:], start=cut):
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:i])} has no attribute {attr!r}"
            obj = getattr(obj, attr)
        return None
    return "no such module"


def references(md_rel: str, content: str | None = None) -> list[tuple[int, str, str]]:
    """(line number, reference, kind) for every checkable reference in one Markdown file (or `content`)."""
    report = md_rel.startswith("results/")
    own_readme = md_rel.endswith("/README.md")  # a folder's README: `sub/` spans name its subfolders
    found: list[tuple[int, str, str]] = []
    in_fence = False
    if content is None:
        content = (ROOT / md_rel).read_text()
    for number, line in enumerate(content.splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            for target in [*LINK.findall(line), *REF_LINK.findall(line)]:
                if not re.match(r"^([a-z][a-z0-9+.-]*:|#)", target, re.I) and not is_placeholder(target):
                    found.append((number, target, "link"))
        if report:
            continue
        # Link targets were checked above; their text and everything else is scanned for paths.
        text = LINK.sub(lambda m: m.group(0).split("](", 1)[0], line)
        spans = [] if in_fence else [span.strip() for _, span in CODE_SPAN.findall(text)]
        prose = text if not in_fence else ""
        code_words = text.split() if in_fence else [w for span in spans for w in span.split()]
        for ref in [repo_path(w, code=True) for w in code_words] + [
                repo_path(w, code=False) for w in CODE_SPAN.sub(" ", prose).split()]:
            if ref:
                found.append((number, ref, "path"))
        if own_readme:
            found.extend((number, span, "folder") for span in spans
                         if re.fullmatch(r"[\w.-]+/", span) and not is_placeholder(span)
                         and not repo_path(span, code=True))
        found.extend((number, m.group(0), "python") for m in DOTTED.finditer(text))
    return found


def test_markdown_references_exist() -> None:
    files = markdown_files()
    assert files, "git ls-files lists no Markdown files"
    broken: list[str] = []
    for md_rel in files:
        md = ROOT / md_rel
        for number, ref, kind in references(md_rel):
            if kind == "python":
                problem = dotted_problem(ref)
            else:
                problem = path_problem(ref, md)
            if problem:
                broken.append(f"{md_rel}:{number}: {ref} ({problem})")
    assert not broken, f"{len(broken)} stale reference(s) in Markdown files:\n" + "\n".join(broken)


@pytest.mark.parametrize(("md_rel", "line", "expected"), [
    ("docs/x.md", "see [the docs](docs/testing.md#tiers) and [site](https://example.com) [top](#top)",
     [("docs/testing.md#tiers", "link")]),
    ("docs/x.md", "`src/kernellab/engine/` and (`tasks.py`)",
     [("src/kernellab/engine/", "path"), ("tasks.py", "path")]),
    ("docs/x.md", "`kernels/OP/`, `results/<run>/`, `docker/locks/NAME.json`, `.venv/bin/x.py`, `~/.cache/k/`", []),
    ("docs/x.md", "`kernellab.ops.library.discover` and `kernellab.lock-sha256`", [("kernellab.ops.library.discover", "python")]),
    ("docs/x.md", "docker/podman, (see tests/test_kernels.py).", [("tests/test_kernels.py", "path")]),
    ("tests/x/README.md", "`oob_write/` holds it", [("oob_write/", "folder")]),
    ("results/x/summary.md", "`src/nowhere.py` [plot](speedup.png)", [("speedup.png", "link")]),
])
def test_extraction(md_rel: str, line: str, expected: list[tuple[str, str]]) -> None:
    """The scanner finds what it should and skips placeholders (guards the allow rules above)."""
    assert [(ref, kind) for _, ref, kind in references(md_rel, line)] == expected


@pytest.mark.parametrize(("ref", "broken"), [
    ("kernellab.ops.spec.discover", False),
    ("kernellab.cuda", False),  # an image label
    ("kernellab.ops.spec.no_such_function", True),
    ("kernellab.no_such_module.discover", True),
])
def test_python_references(ref: str, broken: bool) -> None:
    assert (dotted_problem(ref) is not None) == broken


def test_paths_and_test_ids() -> None:
    md = ROOT / "docs" / "x.md"
    assert path_problem("docs/testing.md#anchor", md) is None
    assert path_problem("tests/test_docs_references.py::test_paths_and_test_ids", md) is None
    assert path_problem("tests/test_docs_references.py::test_nothing", md) is not None
    assert path_problem("docs/no_such_file.md", md) is not None
