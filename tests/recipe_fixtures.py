"""A small paper repository made by the test itself (a git repo with a submodule, served through an
`insteadOf` mirror like a site's), and recipes that build and run it. No network."""
from __future__ import annotations

import subprocess
import textwrap
import uuid
from pathlib import Path

FAKE_URL = "https://github.com/paper-lab/fastop"
SUB_URL = "https://github.com/paper-lab/helper"


def git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(cwd)}
    return subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def one_file_repository(root: Path, name: str, file: str, text: str) -> Path:
    """root/work-<name>, a repository of one committed file, published bare as root/mirror/paper-lab/<name>.git;
    returns the working copy."""
    work = root / f"work-{name}"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / file).write_text(text)
    git("add", ".", cwd=work)
    git("commit", "-qm", name, cwd=work)
    git("clone", "-q", "--bare", str(work), str(root / "mirror" / "paper-lab" / f"{name}.git"), cwd=root)
    return work


def make_mirror(root: Path) -> dict[str, str]:
    """Bare repos under root/mirror/paper-lab/{fastop,helper}.git; returns their commits."""
    mirror = root / "mirror" / "paper-lab"
    mirror.mkdir(parents=True)
    helper = one_file_repository(root, "helper", "helper.sh", "echo helper-ok\n")
    paper = root / "work-paper"
    paper.mkdir()
    git("init", "-q", "-b", "main", cwd=paper)
    (paper / "build.sh").write_text("set -e\nmkdir -p out\necho 'SPEED=2' > out/config\n")
    # A token of this test's own: its build's layers are its own too, so a layer cached by another run of the tests
    # (a step is not deterministic: `date`) never stands in for one this test builds and compares.
    (paper / "run-id").write_text(uuid.uuid4().hex + "\n")
    (paper / "bench.sh").write_text(textwrap.dedent("""\
        set -e
        . out/config
        n=$1
        echo "max diff: 0.001"
        echo "time: $(( n * 10 / SPEED )) ms"
    """))
    git("add", ".", cwd=paper)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(mirror / "helper.git"), "third/helper",
        cwd=paper)
    # The submodule's URL as the paper's .gitmodules has it: the public one, reached through the mirror.
    git("config", "-f", ".gitmodules", "submodule.third/helper.url", SUB_URL, cwd=paper)
    git("add", ".", cwd=paper)
    git("commit", "-qm", "paper", cwd=paper)
    git("clone", "-q", "--bare", str(paper), str(mirror / "fastop.git"), cwd=root)
    return {"paper": git("rev-parse", "HEAD", cwd=paper), "helper": git("rev-parse", "HEAD", cwd=helper)}


def mirror_env(root: Path, monkeypatch) -> None:
    """git everywhere in this test reaches github.com through the mirror, as a site configures it."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{root / 'mirror'}/.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")


PATCH = """\
--- a/build.sh
+++ b/build.sh
@@ -1,3 +1,3 @@
 set -e
 mkdir -p out
-echo 'SPEED=2' > out/config
+echo 'SPEED=5' > out/config
"""


def write_recipe(folder: Path, commits: dict[str, str], *, step2: str = "bash build.sh", target: str = "cpu",
                 extra: str = "", pip: tuple[str, ...] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "patches").mkdir(exist_ok=True)
    (folder / "patches" / "speed.diff").write_text(PATCH)
    (folder / "baseline.sh").write_text('echo "time: $(( $1 * 10 )) ms"\n')
    (folder / "recipe.toml").write_text(textwrap.dedent(f"""\
        [paper]
        title = "FastOp: a fast op"
        venue = "TEST"
        year = 2024
        link = "https://example.org/fastop"

        [environment]
        target = "{target}"
        pip = {list(pip)!r}

        [[sources]]
        name = "fastop"
        url = "{FAKE_URL}"
        commit = "{commits['paper']}"
        submodules = {{ "third/helper" = "{commits['helper']}" }}

        [[patches]]
        file = "patches/speed.diff"
        reason = "the test's stand-in for an arch flag"

        [[steps]]
        name = "stamp"
        run = "date +%s%N > /src/stamp && bash third/helper/helper.sh"

        [[steps]]
        name = "build"
        run = "{step2}"

        [[experiments]]
        name = "fastop"
        run = "bash bench.sh {{n}}"
        grid = {{ n = [10, 20] }}
        quick = {{ n = [10] }}
        repeats = 2
        timeout_s = 60
        metrics = [{{ name = "time_ms", regex = 'time: ([0-9.]+) ms', unit = "ms" }}]
        sanity = [{{ name = "max_diff", regex = 'max diff: ([0-9.]+)', max = 0.01 }}]

        [[experiments]]
        name = "baseline"
        run = "bash /recipe/baseline.sh {{n}}"
        grid = {{ n = [10, 20] }}
        quick = {{ n = [10] }}
        metrics = [{{ name = "time_ms", regex = 'time: ([0-9.]+) ms', unit = "ms" }}]

        [[claims]]
        name = "n10 speedup"
        experiment = "fastop"
        case = {{ n = 10 }}
        value = 20
        unit = "ms"
        baseline = "baseline"
        baseline_value = 100
        gpu = "A100"
        where = "table 1"
        tolerance = 0.1

        [[claims]]
        name = "n20 speedup"
        experiment = "fastop"
        case = {{ n = 20 }}
        value = 10
        unit = "ms"
        baseline = "baseline"
        baseline_value = 200
        gpu = "A100"
        where = "table 1"
        tolerance = 0.1
        {extra}
    """))
    return folder


def with_layernorm_baseline(folder: Path) -> Path:
    """A recipe folder (write_recipe's) that also offers an adapter for kernels/layernorm ([baselines])."""
    (folder / "baselines").mkdir()
    (folder / "baselines" / "layernorm.py").write_text("def baseline(x, w, b):\n    return x\n")
    text = (folder / "recipe.toml").read_text()
    (folder / "recipe.toml").write_text(text.replace("[[experiments]]", '[baselines]\nlayernorm = "baselines/layernorm.py"'
                                                                        "\n\n[[experiments]]", 1))
    return folder


def make_wheel(folder: Path, name: str, version: str) -> Path:
    """A pure-Python wheel NAME==VERSION (a module printing its version) in folder: a wheelhouse without a network."""
    import base64
    import hashlib
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kernellab-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel
