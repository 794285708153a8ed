"""proc.call and Ctrl-C: the child (a container client, the watcher) gets time to stop cleanly, also when
the SIGINT reached kernellab's process alone; one that does not stop is killed after the grace time."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from kernellab import ROOT

CHILD = textwrap.dedent("""
    import signal, sys, time
    def stop(*_):
        time.sleep(0.5)  # cleaning up takes a moment
        print("child stopped cleanly", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGINT, stop if sys.argv[1] == "clean" else signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)
""")

PARENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from kernellab import proc
    proc.INTERRUPT_GRACE_S = 3.0
    print("code", proc.call([sys.executable, "-c", sys.argv[2], sys.argv[3]]), flush=True)
""")


def _start(mode: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", PARENT, str(ROOT / "src"), CHILD, mode], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.parametrize("to_group", [True, False], ids=["ctrl-c-at-a-terminal", "kill-int-to-kernellab-alone"])
def test_the_child_stops_cleanly_and_call_returns_130(to_group: bool) -> None:
    p = _start("clean")
    t0 = time.monotonic()
    if to_group:
        os.killpg(p.pid, signal.SIGINT)
    else:
        os.kill(p.pid, signal.SIGINT)
    out, _ = p.communicate(timeout=20)
    assert out.splitlines() == ["child stopped cleanly", "code 130"], out
    assert time.monotonic() - t0 < 5


def test_a_child_that_ignores_the_interrupt_is_killed_after_the_grace_time() -> None:
    p = _start("stubborn")
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    out, _ = p.communicate(timeout=20)
    assert out.splitlines() == ["code 130"], out
    assert 2.5 < time.monotonic() - t0 < 10
