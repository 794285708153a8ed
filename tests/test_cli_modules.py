"""The task layer lists its modules explicitly, loads every one, and never hides one that fails to import."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from invoke.tasks import Task

from kernellab import cli

CLI_DIR = Path(cli.__file__).parent


def test_every_module_in_the_folder_is_listed() -> None:
    on_disk = {p.stem for p in CLI_DIR.glob("*.py") if p.stem != "__init__"}
    assert on_disk == set(cli.MODULES), "list every kernellab/cli/<name>.py in kernellab.cli.MODULES"


@pytest.mark.parametrize("name", cli.MODULES)
def test_every_listed_module_loads_and_defines_tasks(name: str) -> None:
    module = importlib.import_module(f"kernellab.cli.{name}")
    tasks = [obj for obj in vars(module).values() if isinstance(obj, Task) and obj.__module__ == module.__name__]
    assert tasks, f"kernellab.cli.{name} defines no task"


def test_collection_has_the_tasks_of_every_module() -> None:
    ns = cli.collection()
    for name in cli.MODULES:
        module = importlib.import_module(f"kernellab.cli.{name}")
        for obj in vars(module).values():
            if isinstance(obj, Task) and obj.__module__ == module.__name__:
                assert obj in ns.tasks.values(), f"{obj.name} from kernellab.cli.{name} is missing"


def test_a_listed_module_that_does_not_exist_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "MODULES", ("doctor", "not_written_yet"))
    with pytest.raises(ImportError, match=r"kernellab\.cli\.not_written_yet .*failed to import"):
        cli.collection()


def test_a_module_whose_dependency_is_missing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None):
        if name == "kernellab.cli.doctor":
            raise ModuleNotFoundError("No module named 'somedependency'", name="somedependency")
        return real(name, package)

    monkeypatch.setattr(cli.importlib, "import_module", import_module)
    with pytest.raises(ImportError, match=r"kernellab\.cli\.doctor .*ModuleNotFoundError: No module named 'somedependency'"):
        cli.collection()
