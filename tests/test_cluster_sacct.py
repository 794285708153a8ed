"""slurm.states()'s sacct fallback, against small fake squeue/scontrol/sacct scripts (no Slurm needed).

PATH holds only the fakes' folder, so the one-node Slurm a machine may run is never asked, and a
test that leaves out sacct sees a cluster without it. Each fake appends its arguments to calls.log.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernellab.cluster import slurm

#: What Slurm 22.05's `sacct -n -P -X -j 400,401 -o JobID,State,ExitCode` prints for two arrays.
SACCT = """\
400_0|COMPLETED|0:0
400_1|FAILED|3:0
400_2|CANCELLED by 0|0:15
400_3|TIMEOUT|0:0
400_4|OUT_OF_MEMORY|0:125
401_[5-9]|PENDING|0:0
401_1|RUNNING|0:0
402|COMPLETED|0:0
"""
CONFIG = "AccountingStorageHost   = localhost\nAccountingStorageType   = {}\nMinJobAge               = 300 sec\n"


def fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{folder}/calls.log"\n{body}\n')
    path.chmod(0o755)


def calls(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty PATH folder; the accounting answer is forgotten before and after each test."""
    monkeypatch.setenv("PATH", str(tmp_path))
    slurm.accounting.cache_clear()
    yield tmp_path
    slurm.accounting.cache_clear()


def cluster(folder: Path, storage: str, *, squeue: str = "", sacct: str | None = SACCT, sacct_rc: int = 0) -> None:
    """Fakes of a cluster whose slurmctld has forgotten every job but those squeue prints."""
    fake(folder, "squeue", f"printf '%s' '{squeue}'")
    config = CONFIG.format(storage)
    fake(folder, "scontrol", f"""case "$1 $2" in
  "show config") printf '%s' '{config}' ;;
  *) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;
esac""")
    if sacct is not None:
        refuse = "echo 'Slurm accounting storage is disabled' >&2; " if sacct_rc else ""
        fake(folder, "sacct", f"{refuse}printf '%s' '{sacct}'; exit {sacct_rc}")


def test_parse_sacct() -> None:
    lines = SACCT.splitlines()
    assert slurm.parse_sacct(lines[0]) == (("400", 0), slurm.TaskState("COMPLETED", "", "0:0"))
    assert slurm.parse_sacct(lines[1]) == (("400", 1), slurm.TaskState("FAILED", "", "3:0"))
    assert slurm.parse_sacct(lines[2]) == (("400", 2), slurm.TaskState("CANCELLED", "", "0:15"))  # "by <uid>" dropped
    assert slurm.parse_sacct(lines[4] + "\n") == (("400", 4), slurm.TaskState("OUT_OF_MEMORY", "", "0:125"))
    assert slurm.parse_sacct(lines[5]) is None              # tasks not started: squeue -r reports them
    assert slurm.parse_sacct(lines[7]) is None              # not an array task
    assert slurm.parse_sacct("400_1.batch|FAILED|3:0") is None  # a step (-X leaves them out anyway)
    assert slurm.parse_sacct("") is None
    assert slurm.parse_sacct("400_1|FAILED") is None
    assert slurm.parse_sacct("400_1||0:0") is None
    assert slurm.TaskState("CANCELLED").final and not slurm.TaskState("RUNNING").final


def test_states_ask_sacct_only_about_jobs_slurmctld_forgot(bin_dir: Path) -> None:
    cluster(bin_dir, "accounting_storage/slurmdbd", squeue="401_1|RUNNING|node7\n")
    found = slurm.states(["400", "401"])
    assert "sacct -n -P -X -j 400 -o JobID,State,ExitCode" in calls(bin_dir)  # 401 is still in squeue
    assert found[("400", 1)] == slurm.TaskState("FAILED", "", "3:0")
    assert found[("400", 2)] == slurm.TaskState("CANCELLED", "", "0:15")
    assert found[("400", 3)].final
    assert found[("401", 1)] == slurm.TaskState("RUNNING", "node7")  # squeue's, with its node
    assert sorted(found) == [("400", 0), ("400", 1), ("400", 2), ("400", 3), ("400", 4), ("401", 1)]


def test_accounting_is_decided_once(bin_dir: Path) -> None:
    cluster(bin_dir, "accounting_storage/slurmdbd")
    slurm.states(["400"])
    slurm.states(["400"])
    assert sum(c == "scontrol show config" for c in calls(bin_dir)) == 1
    assert sum(c.startswith("sacct ") for c in calls(bin_dir)) == 2


def test_states_without_accounting_never_call_sacct(bin_dir: Path) -> None:
    cluster(bin_dir, "accounting_storage/none")
    assert slurm.states(["400"]) == {}
    assert not slurm.accounting()
    assert not [c for c in calls(bin_dir) if c.startswith("sacct")]


def test_sacct_that_refuses_or_is_missing_gives_nothing(bin_dir: Path) -> None:
    cluster(bin_dir, "accounting_storage/slurmdbd", sacct_rc=1)  # prints records, then exits 1
    assert slurm.states(["400"]) == {}
    assert slurm.accounted(["400"]) == {}
    assert [c for c in calls(bin_dir) if c.startswith("sacct")]
    (bin_dir / "sacct").unlink()
    slurm.accounting.cache_clear()
    assert not slurm.accounting()
    assert slurm.states(["400"]) == {}


def test_accounting_when_scontrol_fails(bin_dir: Path) -> None:
    fake(bin_dir, "sacct", "exit 0")
    assert not slurm.accounting()  # no scontrol on PATH: never raises
    fake(bin_dir, "scontrol", "echo 'slurm_load_ctl_conf error: Unable to contact slurm controller' >&2; exit 1")
    slurm.accounting.cache_clear()
    assert not slurm.accounting()


def test_a_live_state_in_the_accounting_of_a_forgotten_job_is_stale_and_left_out(bin_dir: Path) -> None:
    # slurmctld knows every live job: sacct's RUNNING for one it forgot is a runaway record, and
    # following it would never end; left out, the task's status file decides.
    cluster(bin_dir, "accounting_storage/slurmdbd", sacct="500_0|RUNNING|0:0\n500_1|COMPLETED|0:0\n")
    found = slurm.states(["500"])
    assert sorted(found) == [("500", 1)] and found[("500", 1)].state == "COMPLETED"
