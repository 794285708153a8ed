"""`invoke devcontainer` and `invoke notebook` against a real Docker engine, driven from outside.

- The Dev Containers CLI (npm @devcontainers/cli, pinned in .ci/test-tools.sh) brings up the file
  `invoke devcontainer` writes for the cpu target, and runs a command in it as the caller's UID.
- `invoke notebook` runs as a subprocess: real HTTP requests to its /api/status, a headless
  Chromium (Debian's) loads the lab page; the screenshot is kept at /tmp/notebook.png. Ctrl-C
  (SIGINT to its process group, as a terminal sends it) stops it and removes the container.

Tools come from `make test-tools` (`make test` runs it); missing ones skip these tests, or fail
them where KERNELLAB_REQUIRE_DOCKER=1 (CI).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
import zlib
from pathlib import Path

import pytest

from kernellab import engine
from kernellab.container import devenv, runner

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
DOCKER = engine.by_name("docker")
TOOLS = ROOT / ".ci" / "test-tools.sh"
DEVCONTAINER = ROOT / ".cache" / "devcontainers-cli" / "node_modules" / ".bin" / "devcontainer"
SCREENSHOT = Path("/tmp/notebook.png")


def _missing(what: str) -> None:
    message = f"needs {what}; run `make test-tools` (as root the first time)"
    if os.environ.get("KERNELLAB_REQUIRE_DOCKER") == "1":
        pytest.fail(f"KERNELLAB_REQUIRE_DOCKER=1 but this test {message}", pytrace=False)
    pytest.skip(message)


def _tools() -> None:
    """Install what is missing the way a fresh machine does (idempotent; OS packages only as root)."""
    subprocess.run(["bash", str(TOOLS)], cwd=ROOT, check=False, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def devcontainer_cli() -> str:
    if not DEVCONTAINER.exists():
        _tools()
    if not DEVCONTAINER.exists():
        _missing("the Dev Containers CLI (npm @devcontainers/cli; node and npm)")
    return str(DEVCONTAINER)


@pytest.fixture(scope="session")
def chromium() -> str:
    if shutil.which("chromium") is None:
        _tools()
    found = shutil.which("chromium")
    if found is None:
        _missing("Debian's chromium")
    return str(found)


@pytest.fixture(scope="session")
def cpu_image(default_image: str) -> str:
    """kernellab:cpu as the matrix describes it now (with the jupyter extra): conftest's default_image."""
    assert "jupyter" in devenv.image_extras(default_image, engine=DOCKER)
    return default_image


def _invoke(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", *args]


# --------------------------------------------------------------------------- devcontainer

@pytest.fixture
def writable_dir():
    """A folder in the repository (ignored by git) that any UID may write to, removed afterwards."""
    d = ROOT / ".cache" / f"devcontainer-test-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("who", ["caller", "another-user"])
def test_devcontainers_cli_brings_up_the_written_file_as_the_users_uid(who, cpu_image, devcontainer_cli, writable_dir,
                                                                       tmp_path, monkeypatch):
    if who == "caller":
        # The task itself, as a user runs it: .devcontainer/cpu/devcontainer.json in the repository.
        r = subprocess.run(_invoke("devcontainer", "--target", "cpu"), cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        config = ROOT / ".devcontainer" / "cpu" / "devcontainer.json"
        assert f"wrote {config.relative_to(ROOT)}" in r.stdout
        uid, gid = runner.caller_ids()
    else:
        # CI runs as root, where "the caller's UID" proves little: the same file for UID 4321, as `sudo` writes it.
        monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
        uid, gid = 4321, 4321
        config = devenv.write_devcontainer("cpu", cpu_image, user=(uid, gid), root=tmp_path, gpu=False, engine=DOCKER)
    assert devenv.read_jsonc(config)["containerUser"] == f"{uid}:{gid}"
    where = ["--workspace-folder", str(ROOT), "--config", str(config)]
    up = subprocess.run([devcontainer_cli, "up", *where, "--remove-existing-container"], capture_output=True,
                        text=True, timeout=600)
    result = json.loads(up.stdout.strip().splitlines()[-1]) if up.stdout.strip() else {}
    try:
        assert up.returncode == 0 and result.get("outcome") == "success", up.stdout[-3000:] + up.stderr[-3000:]
        made = writable_dir / "made-by-exec"
        code = (f"import torch, kernellab; import os; print(os.getuid()); "
                f"open('/workspace/{made.relative_to(ROOT)}', 'w').close()")
        ex = subprocess.run([devcontainer_cli, "exec", *where, "python", "-c", code], capture_output=True, text=True,
                            timeout=300)
        assert ex.returncode == 0, ex.stdout[-3000:] + ex.stderr[-3000:]
        assert ex.stdout.strip().splitlines()[-1] == str(uid)
        assert (made.stat().st_uid, made.stat().st_gid) == (uid, gid), "files made in /workspace are the user's"
    finally:
        if result.get("containerId"):
            subprocess.run(["docker", "rm", "-f", result["containerId"]], capture_output=True)
    if result.get("containerId"):
        gone = subprocess.run(["docker", "ps", "-aq", "--filter", f"id={result['containerId']}"], capture_output=True,
                              text=True)
        assert gone.stdout.strip() == ""


# --------------------------------------------------------------------------- notebook

class Output:
    """A subprocess's output, read in the background, so a test can wait for a line."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if needle in line:
                    return line
            time.sleep(0.2)
        raise AssertionError(f"no line with {needle!r} in {timeout:.0f} s; output:\n{self.text[-3000:]}")


def _status(port: int, token: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/status",
                                 headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def png_colours(path: Path) -> int:
    """How many distinct colours an 8-bit, non-interlaced PNG (what Chromium writes) has."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    channels = {0: 1, 2: 3, 4: 2, 6: 4}
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in channels and interlace == 0, (depth, colour, interlace)
            bpp = channels[colour]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * bpp
    prev, colours = bytearray(stride), set()
    for y in range(height):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(bytes(row[i:i + bpp]) for i in range(0, stride, bpp))
        prev = row
    return len(colours)


def _command_lines() -> str:
    out = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            out.append(p.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(out)


def test_notebook_serves_jupyterlab_to_its_token_only_a_browser_renders_it_and_ctrl_c_removes_it(
        cpu_image, chromium, tmp_path):
    port = devenv.free_port(18888)
    nb = subprocess.Popen(_invoke("notebook", "--target", "cpu", "--port", str(port)), cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = Output(nb.stdout)
    try:
        url = out.wait_for("/lab?token=", 120).strip()
        assert url.startswith(f"http://127.0.0.1:{port}/lab?token=")
        token = url.split("token=", 1)[1]
        name = out.wait_for("(container ", 5).split("(container ", 1)[1].split(")")[0]
        assert f"ssh -L {port}:127.0.0.1:{port} " in out.text
        deadline = time.monotonic() + 180
        while True:
            try:
                code, body = _status(port, token)
                if code == 200:
                    break
            except OSError:
                pass
            assert nb.poll() is None, f"invoke notebook exited early:\n{out.text[-3000:]}"
            assert time.monotonic() < deadline, f"JupyterLab did not answer on port {port}:\n{out.text[-3000:]}"
            time.sleep(1)
        assert "started" in json.loads(body)
        assert _status(port, None)[0] == 403, "no token, no API"
        assert _status(port, "not-" + token)[0] == 403
        assert token not in _command_lines(), "the token is passed by environment, never on a command line"
        published = subprocess.run(["docker", "port", name], capture_output=True, text=True).stdout
        assert published.strip().splitlines() == [f"{port}/tcp -> 127.0.0.1:{port}"], "127.0.0.1 only"

        SCREENSHOT.unlink(missing_ok=True)
        browser = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,800",
             f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=30000",
             f"--screenshot={SCREENSHOT}", "--dump-dom", url],
            capture_output=True, text=True, timeout=180)
        dom = browser.stdout
        title = dom.split("<title>", 1)[1].split("</title>", 1)[0] if "<title>" in dom else ""
        assert "JupyterLab" in title, (title, browser.stderr[-2000:])
        assert "jp-LabShell" in dom and "jp-Launcher" in dom, "the lab's shell and launcher were rendered"
        assert SCREENSHOT.exists(), browser.stderr[-2000:]
        assert png_colours(SCREENSHOT) > 16, f"{SCREENSHOT} is (nearly) blank"
    finally:
        if nb.poll() is None:
            os.killpg(nb.pid, signal.SIGINT)  # Ctrl-C, as a terminal sends it to the foreground group
        try:
            nb.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(nb.pid, signal.SIGKILL)
            nb.wait()
    assert "stopped; container" in out.text, out.text[-2000:]
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^{name}$"], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"container {name} is still there after Ctrl-C"
