"""`invoke recipe` as a newcomer meets it: help from every spelling of it, counts that read as English, a check that
fetches and patches before anything is built (`check --fetch`), and the pairing of each claim's cases said aloud."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import count, shown
from kernellab.errors import RecipeError
from kernellab.recipes import read, reproduce, sources
from recipe_fixtures import write_recipe

ROOT = Path(__file__).resolve().parents[1]
VERBS = ("list", "check", "build", "run", "profile", "shell", "export")


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120)


# --------------------------------------------------------------------------- help

@pytest.fixture(scope="module")
def task_help() -> str:
    """What `invoke --help recipe` (invoke's own spelling) prints: the verbs, then every flag."""
    r = invoke("--help", "recipe")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_task_help_lists_every_verb_and_the_fetch_flag(task_help):
    for verb in VERBS:
        assert f"\n  {verb} " in task_help or f"  {verb}\n" in task_help, verb
    assert "--fetch" in task_help and "--verb=STRING" in task_help


@pytest.mark.parametrize("args", [("recipe", "--help"), ("recipe", "-h"), ("recipe", "help"),
                                  ("recipe", "check", "--help"), ("recipe", "run", "-h"), ("recipe", "help", "check")])
def test_every_spelling_of_help_shows_the_task_help_and_exits_0(args, task_help):
    r = invoke(*args)
    assert (r.returncode, r.stderr) == (0, ""), args
    assert r.stdout == task_help, args


def test_a_bare_recipe_shows_the_help_and_exits_2_naming_the_verbs(task_help):
    r = invoke("recipe")
    assert r.returncode == 2 and r.stdout == task_help
    assert r.stderr.strip() == ("kernellab: `invoke recipe` needs a verb: list, check, build, run, profile, shell or "
                                "export (each with its flags above).")
    assert "did not receive required positional arguments" not in r.stderr


def test_help_is_never_a_positional_value_of_another_task():
    r = invoke("import-image", "--help")
    assert r.returncode == 0 and "Usage:" in r.stdout and "import-image" in r.stdout and r.stderr == ""


def test_an_unknown_verb_points_at_the_help():
    r = invoke("recipe", "rn", "demo")
    assert r.returncode == 2 and "`invoke recipe rn` is not a verb" in r.stderr and "invoke recipe --help" in r.stderr


# --------------------------------------------------------------------------- counts

def test_counts_read_as_english():
    assert [count(n, "case") for n in (0, 1, 2)] == ["0 cases", "1 case", "2 cases"]
    assert count(1, "patch") == "1 patch" and count(3, "patch") == "3 patches"


def _edit(folder: Path, old: str, new: str) -> None:
    f = folder / "recipe.toml"
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new))


#: The fixture recipe's baseline with no grid: one case, whatever n the candidate has.
BASELINE_GRID = 'run = "bash /recipe/baseline.sh {n}"\ngrid = { n = [10, 20] }\nquick = { n = [10] }\n'
NO_GRID = 'run = "bash /recipe/baseline.sh 10"\n'


def test_check_counts_one_case_and_one_claim_in_the_singular(tmp_path):
    folder = write_recipe(tmp_path / "f", {"paper": "a" * 40, "helper": "b" * 40})
    _edit(folder, BASELINE_GRID, NO_GRID)
    _edit(folder, "case = { n = 10 }\n", "")
    _edit(folder, '[[claims]]\nname = "n20 speedup"', '[[unused]]\nname = "n20 speedup"')
    (folder / "recipe.toml").write_text((folder / "recipe.toml").read_text().split("[[unused]]")[0])
    text = reproduce.check(str(folder))
    assert "fastop (2 cases x 2 repeats), baseline (1 case x 1 repeat)" in text
    assert "claims: 1 (1 ratio)" in text
    assert "2 experiments, 1 claim\n" in reproduce.listing(tmp_path) + "\n"


# --------------------------------------------------------------------------- check --fetch

def test_check_without_fetch_says_how_to_check_the_patches(paper):
    root, commits = paper
    text = reproduce.check(str(write_recipe(root / "r" / "fastop", commits)))
    assert f"patches: 1 (not checked until fetched: speed.diff; `invoke recipe check {root / 'r' / 'fastop'} --fetch` fetches and applies them)" in text
    assert not (root / "cache" / "recipes" / "objects").exists(), "nothing fetched"


def test_check_fetch_fetches_through_the_mirror_verifies_the_pins_and_applies_the_patches(paper, capsys):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    text = reproduce.check(str(folder), fetch=True)
    assert f"sources: fastop {commits['paper'][:12]} (fetched; commit and submodule third/helper at " \
           f"{commits['helper'][:12]} verified)" in text
    assert "patches: 1 (apply cleanly)" in text
    assert "fetching https://github.com/paper-lab/fastop" in capsys.readouterr().out
    assert sources.fetched(read.load(str(folder)).sources[0])
    # No build: the object stores only (and the values read from the target's image, where one is built already);
    # no build context, no scratch checkout left behind.
    assert {p.name for p in (root / "cache" / "recipes").iterdir()} <= {"objects", "probes"}


def test_check_fetch_refuses_a_commit_the_mirror_lacks(paper):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", {**commits, "paper": "f" * 40})
    with pytest.raises(RecipeError, match=r"https://github.com/paper-lab/fastop has no commit f{40}; check the "
                                          r"recipe's commit"):
        reproduce.check(str(folder), fetch=True)


def test_check_fetch_refuses_a_submodule_pin_the_commit_does_not_record(paper):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", {**commits, "helper": "e" * 40})
    with pytest.raises(RecipeError, match=rf"submodule third/helper is at {commits['helper']}, not the recipe's e{{40}}"):
        reproduce.check(str(folder), fetch=True)


def test_check_fetch_reports_a_patch_that_does_not_apply_as_build_does(paper):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    (folder / "patches/speed.diff").write_text((folder / "patches/speed.diff").read_text().replace("SPEED=2", "SPEED=3"))
    with pytest.raises(RecipeError, match=r"patch patches/speed.diff does not apply to fastop at build.sh line 1; "
                                          r"remake it against commit"):
        reproduce.check(str(folder), fetch=True)


def test_the_task_passes_fetch_and_exits_2_on_a_bad_patch(paper):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    r = invoke("recipe", "check", str(folder), "--fetch")
    assert r.returncode == 0 and "patches: 1 (apply cleanly)" in r.stdout, r.stderr
    (folder / "patches/speed.diff").write_text((folder / "patches/speed.diff").read_text().replace("SPEED=2", "SPEED=3"))
    r = invoke("recipe", "check", str(folder), "--fetch")
    assert r.returncode == 2 and "patch patches/speed.diff does not apply to fastop at build.sh line 1" in r.stderr


# --------------------------------------------------------------------------- pairing

def test_check_says_how_the_demos_claims_pair_their_cases():
    text = reproduce.check("demo")
    assert '    "CPU n2048 speedup": blocked n=2048 against naive n=2048\n' in text
    assert '    "GPU n8192 speedup": tiled-cuda n=8192 against naive-cuda n=8192 (--quick leaves it out)\n' in text
    assert '    "GPU n8192 time on V100": tiled-cuda n=8192 (absolute: judged only on the paper\'s V100; --quick leaves it out)' in text


def test_a_claim_without_a_case_pairs_the_first_of_a_grid_with_a_baseline_without_one(tmp_path):
    folder = write_recipe(tmp_path / "f", {"paper": "a" * 40, "helper": "b" * 40})
    _edit(folder, BASELINE_GRID, NO_GRID)
    _edit(folder, "case = { n = 10 }\n", "")
    _edit(folder, "case = { n = 20 }\n", "")
    text = reproduce.check(str(folder))
    assert ('"n10 speedup": fastop n=10 (the first case of its grid: the claim names no case) against baseline '
            '(its only case: it has no grid)') in text


def test_a_pairing_that_can_never_happen_is_refused_naming_file_and_key(tmp_path):
    folder = write_recipe(tmp_path / "f", {"paper": "a" * 40, "helper": "b" * 40})
    _edit(folder, BASELINE_GRID, NO_GRID)
    with pytest.raises(RecipeError) as e:
        reproduce.check(str(folder))
    assert str(e.value) == (
        f"{shown(folder / 'recipe.toml')}: claims[0].case {{n = 10}} is never a case of baseline experiment baseline (it "
        f"has no grid: its one case has no n), so claim \"n10 speedup\" could never be judged; give baseline a grid "
        f"with n = 10, or drop n from the claim's case.")
