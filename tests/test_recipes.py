"""Recipes without an engine: reading and checking recipe.toml, sources through an insteadOf mirror (real git),
patches, experiments' metrics and sanity patterns (a recording runner), claims' verdicts (synthetic cases)."""
from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from kernellab.errors import RecipeError
from kernellab.recipes import claims, experiments, model, read, sources, trees
from kernellab.recipes.experiments import Case, Checked, Repeat
from recipe_fixtures import git, one_file_repository, write_recipe

ONE_RUN = Repeat(1, 0, 0.1, "raw/x-r1.txt", {})


def test_every_shipped_recipe_reads_and_names_its_claims_baselines():
    assert "demo" in read.names()
    for name in read.names():
        r = read.load(name)
        assert (r.sources or r.packages) and r.experiments and (r.claims or r.paper.no_claims)
        for c in r.claims:
            assert c.judge == "absolute" or r.experiment(c.baseline).metric(c.metric)


def test_every_shipped_recipe_builds_only_code_of_its_own_pinned_at_its_files_commit(tmp_path, monkeypatch):
    """kernellab ships no recipe that fetches or builds code from outside the repository: every source of a
    shipped recipe is a folder beside its recipe.toml, and its pin is the commit those files make today."""
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    for name in read.names():
        r = read.load(name)
        for s in r.sources:
            assert s.folder is not None and s.url == "" and s.folder.is_relative_to(r.folder), (name, s.name)
        for p in r.packages:  # a system from PyPI is a package pinned by version (its wheel by sha256), never a URL
            assert "/" not in p.name and "://" not in p.version, (name, p)
            assert sources.folder_commit(s.folder) == s.commit, f"{name}: pin {s.name} again (`invoke recipe check`)"
        assert trees.check_patches(r) == [] and all(p.reason for p in r.patches)


def test_the_demo_has_the_whole_loop_two_sources_patches_steps_a_baseline_and_claims():
    r = read.load("demo")
    assert [(s.name, s.dest) for s in r.sources] == [("transpose", "."), ("minibench", "third_party/minibench")]
    assert len(r.patches) == 2 and [s.name for s in r.steps] == ["configure", "compile"]
    assert {c.baseline for c in r.claims if c.judge == "ratio"} == {"naive", "naive-cuda"}
    assert r.requirements.cpu and [e.name for e in r.experiments if e.needs_cuda] == ["tiled-cuda", "naive-cuda"]
    assert all(e.sanity for e in r.experiments), "every case is checked, not only timed"


def test_an_unknown_recipe_suggests_the_closest_name():
    with pytest.raises(RecipeError, match=r"no recipe named `demoo`; did you mean `demo`\?"):
        read.load("demoo")


#: An absolute claim on the fixture recipe's fastop n=10 (its third claim).
ABSOLUTE = ('\n[[claims]]\nname = "n10 time"\nexperiment = "fastop"\ncase = { n = 10 }\njudge = "absolute"\n'
            'value = 21\nunit = "ms"\ngpu = "A100"\nwhere = "table 2"\n')


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace('venue = "TEST"', 'venue = "TEST"\nyear2 = 1'), r"paper has unknown keys \['year2'\]"),
    (lambda t: re.sub(r'commit = "[0-9a-f]+"', 'commit = "main"', t, count=1),
     r"sources\[0\]\.commit must be a full 40-hex commit \(never a branch or a tag\), not 'main'"),
    (lambda t: t.replace("patches/speed.diff", "patches/nope.diff"), r"patches\[0\]\.file names patches/nope\.diff"),
    (lambda t: t.replace("bash bench.sh {n}", "bash bench.sh {m}"), r"experiments\[0\]\.run uses \{m\}"),
    (lambda t: t.replace("'time: ([0-9.]+) ms'", "'time: [0-9.]+ ms'", 1), r"regex must have exactly one group"),
    (lambda t: t.replace("case = { n = 10 }", "case = { n = 11 }"), r"claims\[0\]\.case \{'n': 11\} is not a case"),
    (lambda t: t.replace('baseline = "baseline"', 'baseline = "baselin"', 1), r"did you mean `baseline`"),
    (lambda t: t.replace("[paper]", "[paper\n"), r"is not valid TOML"),
    # An absolute claim's GPU is one word of the GPU's name: "RTX A6000" would never be judged.
    (lambda t: t + ABSOLUTE.replace('"A100"', '"RTX A6000"'),
     r"claims\[2\]\.gpu is 'RTX A6000', but an absolute claim is judged where its gpu is one word .* such as A6000"),
])
def test_a_malformed_recipe_is_one_sentence_naming_file_and_key(tmp_path, edit, words):
    folder = write_recipe(tmp_path / "recipes" / "fastop", {"paper": "a" * 40, "helper": "b" * 40})
    (folder / "recipe.toml").write_text(edit((folder / "recipe.toml").read_text()))
    with pytest.raises(RecipeError, match=words) as e:
        read.load("fastop", tmp_path / "recipes")
    assert "recipes/fastop/recipe.toml" in str(e.value) and "\n" not in str(e.value)


def test_placeholders_leave_the_shells_variables_alone():
    assert model.substitute("make -j {jobs} ARCH=${ARCH} {x}", {"jobs": 4}) == "make -j 4 ARCH=${ARCH} {x}"


def test_derived_values_are_arithmetic_only():
    assert model.evaluate("seqlen * 60 // 100", {"seqlen": 512}) == 307
    with pytest.raises(RecipeError, match="may use only numbers"):
        model.evaluate("__import__('os')", {})


def test_sources_come_through_the_mirror_with_submodules_verified(paper):
    root, commits = paper
    recipe = read.load(str(write_recipe(root / "r" / "fastop", commits)))
    got = sources.fetch(recipe.sources[0])
    assert got["commit"] == commits["paper"] and got["submodules"] == {"third/helper": commits["helper"]}
    tree = root / "tree"
    trees.prepare(recipe, tree)
    assert "SPEED=5" in (tree / "build.sh").read_text()          # the patch applied
    assert (tree / "third/helper/helper.sh").is_file()             # the submodule checked out
    assert sources.fetched(recipe.sources[0])                      # in the stores: no second fetch
    said = io.StringIO()
    assert sources.fetch(recipe.sources[0], said) == got and said.getvalue() == ""
    # The tree stands alone (no alternates into the store): it is copied into a build context.
    for repo in (tree, tree / "third/helper"):
        assert not (repo / ".git/objects/info/alternates").exists()


def test_two_commits_of_one_url_share_its_store_and_a_held_commit_needs_no_remote(paper):
    root, commits = paper
    work = root / "work-paper"
    (work / "bench.sh").write_text((work / "bench.sh").read_text() + "echo second\n")
    git("commit", "-qam", "second", cwd=work)
    git("push", "-q", str(root / "mirror/paper-lab/fastop.git"), "HEAD:refs/heads/main", cwd=work)
    second = git("rev-parse", "HEAD", cwd=work)
    one = read.load(str(write_recipe(root / "r1" / "fastop", commits)))
    two = read.load(str(write_recipe(root / "r2" / "fastop", {**commits, "paper": second})))
    said = io.StringIO()
    sources.fetch(one.sources[0], said)
    assert said.getvalue().count("fetching") == 2, "the paper and its submodule, once each"
    said = io.StringIO()
    sources.fetch(two.sources[0], said)
    assert said.getvalue() == f"fetching https://github.com/paper-lab/fastop at {second[:12]}\n", "the helper is held"
    assert sources.object_store(one.sources[0]) == sources.object_store(two.sources[0])
    assert sorted(p.name for p in (root / "cache/recipes/objects").iterdir()) == [
        "github.com_paper-lab_fastop.git", "github.com_paper-lab_helper.git"]
    (root / "mirror").rename(root / "mirror-gone")  # the remote is unreachable now: held commits need it not
    for recipe, tree in ((one, root / "t1"), (two, root / "t2")):
        said = io.StringIO()
        got = trees.prepare(recipe, tree, said)
        assert said.getvalue() == "" and got["fastop"]["commit"] == recipe.sources[0].commit
    assert "echo second" in (root / "t2/bench.sh").read_text() and "echo second" not in (root / "t1/bench.sh").read_text()
    third = read.load(str(write_recipe(root / "r3" / "fastop", {**commits, "paper": "3" * 40})))
    with pytest.raises(RecipeError, match=r"cannot fetch https://github.com/paper-lab/fastop .*mirror that repository "
                                          r"with commit 3{40}"):
        sources.fetch(third.sources[0])


def test_a_commit_the_mirror_lacks_is_named(paper):
    root, commits = paper
    recipe = read.load(str(write_recipe(root / "r" / "fastop", {**commits, "paper": "1" * 40})))
    with pytest.raises(RecipeError, match=r"https://github.com/paper-lab/fastop has no commit 1{40}"):
        sources.fetch(recipe.sources[0])


def test_an_unreachable_source_names_url_and_commit_to_mirror(paper, monkeypatch):
    root, commits = paper
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://example.invalid/")  # the mirror no longer covers github.com
    recipe = read.load(str(write_recipe(root / "r" / "fastop", commits)))
    with pytest.raises(RecipeError, match=rf"cannot fetch https://github.com/paper-lab/fastop .*mirror that repository "
                                          rf"with commit {commits['paper']}"):
        sources.fetch(recipe.sources[0])


def test_a_mirror_that_lacks_the_repository_is_named_as_git_reached_it(paper):
    import shutil

    root, commits = paper
    shutil.rmtree(root / "mirror/paper-lab/fastop.git")
    recipe = read.load(str(write_recipe(root / "r" / "fastop", commits)))
    with pytest.raises(RecipeError, match=rf"cannot fetch https://github.com/paper-lab/fastop \(git rewrites it to "
                                          rf"{root}/mirror/paper-lab/fastop, through url.<base>.insteadOf\) "
                                          rf".*mirror that repository with commit {commits['paper']}"):
        sources.fetch(recipe.sources[0])


def test_a_mistyped_commit_sharing_the_first_12_digits_is_not_served_from_the_cache(paper):
    """The cache was keyed by 12 hex digits: a typo after them built silently from the other commit."""
    root, commits = paper
    good = read.load(str(write_recipe(root / "r" / "fastop", commits)))
    sources.fetch(good.sources[0])
    typo = commits["paper"][:12] + ("0" if commits["paper"][12] != "0" else "1") + commits["paper"][13:]
    bad = read.load(str(write_recipe(root / "r2" / "fastop", {**commits, "paper": typo})))
    with pytest.raises(RecipeError, match=rf"has no commit {typo}"):
        trees.prepare(bad, root / "tree")


def _pristine(recipe: model.Recipe, tree: Path, commits: dict[str, str], out: io.StringIO | None = None) -> None:
    """A tree prepared afresh: the source's commit, patched, the submodule at its commit; nothing else."""
    got = trees.prepare(recipe, tree, out)
    assert got["fastop"]["commit"] == commits["paper"] and got["fastop"]["submodules"] == {"third/helper": commits["helper"]}
    assert (tree / "build.sh").read_text().endswith("echo 'SPEED=5' > out/config\n"), "pristine, then patched"
    assert not (tree / "extra.sh").exists()
    assert (tree / "third/helper/helper.sh").read_text() == "echo helper-ok\n"
    assert git("rev-parse", "HEAD", cwd=tree) == commits["paper"]
    assert git("rev-parse", "HEAD", cwd=tree / "third/helper") == commits["helper"]


def test_every_tree_is_made_fresh_and_no_edit_in_an_earlier_tree_or_a_store_reaches_it(paper):
    """The patch hint once sent users into a cached checkout; what they edited there reached later images."""
    root, commits = paper
    recipe = read.load(str(write_recipe(root / "r" / "fastop", commits)))
    first = root / "tree"
    _pristine(recipe, first, commits)
    # An earlier tree edited, a file added, a commit made in it: the next tree is made from the store, not from it.
    (first / "build.sh").write_text("echo tampered\n")
    (first / "extra.sh").write_text("echo untracked\n")
    (first / "third/helper/helper.sh").write_text("echo tampered-too\n")
    git("add", "-A", cwd=first)
    git("commit", "-qm", "tampered", cwd=first)
    _pristine(recipe, root / "tree2", commits)
    # The store's refs moved to a tampered commit: trees are made by commit, refs name nothing a build reads.
    store = sources.object_store(recipe.sources[0])
    bad = git("--git-dir", str(store), "commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-m", "tampered",
              cwd=root)  # a commit of the empty tree
    for ref in git("--git-dir", str(store), "for-each-ref", "--format=%(refname)", cwd=root).split():
        git("--git-dir", str(store), "update-ref", ref, bad, cwd=root)
    _pristine(recipe, root / "tree3", commits)
    # Its objects gone (a half-deleted cache): fetched again, through the mirror.
    for pack in (store / "objects/pack").iterdir():
        pack.unlink()
    assert not sources.fetched(recipe.sources[0])
    said = io.StringIO()
    _pristine(recipe, root / "tree4", commits, said)
    assert said.getvalue() == f"fetching https://github.com/paper-lab/fastop at {commits['paper'][:12]}\n"
    # An object damaged in place: an error naming the store, never another tree.
    pack = next((store / "objects/pack").glob("*.pack"))
    data = bytearray(pack.read_bytes())
    for i in range(len(data) // 2, len(data) - 20):
        data[i] ^= 0x5A
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    with pytest.raises(RecipeError, match=rf"the object store {store} cannot give commit {commits['paper']} .*damaged; "
                                          r"delete it and build again"):
        trees.prepare(recipe, root / "tree5")
    shutil.rmtree(store)
    _pristine(recipe, root / "tree6", commits)


def test_a_changed_submodule_pin_is_refused_with_a_warm_store_too(paper):
    root, commits = paper
    recipe = read.load(str(write_recipe(root / "r" / "fastop", commits)))
    trees.prepare(recipe, root / "tree")          # the stores are warm now
    (root / "mirror").rename(root / "mirror-gone")  # and nothing is fetched again
    changed = read.load(str(write_recipe(root / "r2" / "fastop", {**commits, "helper": "2" * 40})))
    with pytest.raises(RecipeError, match=r"submodule third/helper is at [0-9a-f]{40}, not the recipe's 2{40}"):
        trees.prepare(changed, root / "tree2")
    with pytest.raises(RecipeError, match=r"submodule third/helper is at [0-9a-f]{40}, not the recipe's 2{40}"):
        sources.fetch(changed.sources[0])
    folder = write_recipe(root / "r3" / "fastop", commits)
    text = (folder / "recipe.toml").read_text()
    (folder / "recipe.toml").write_text(text.replace('"third/helper" =', '"third/helpr" ='))
    with pytest.raises(RecipeError, match=r"has no submodule third/helpr \(it has: third/helper\)"):
        trees.prepare(read.load(str(folder)), root / "tree3")
    assert not (root / "tree2").exists() and trees.prepare(recipe, root / "tree4")["fastop"]["submodules"] == {
        "third/helper": commits["helper"]}


def test_a_submodule_at_another_commit_than_the_recipes_is_refused(paper):
    root, commits = paper
    recipe = read.load(str(write_recipe(root / "r" / "fastop", {**commits, "helper": "2" * 40})))
    with pytest.raises(RecipeError, match=r"submodule third/helper is at [0-9a-f]{40}, not the recipe's 2{40}"):
        sources.fetch(recipe.sources[0])


def test_nested_submodules_with_relative_urls_are_fetched_into_stores_of_their_own_as_git_would(paper):
    """helper gets a submodule of its own at `../deep.git` (relative to helper's URL, as git reads it); the paper
    records that helper commit. The provenance names the nested path from the top, as `git submodule status
    --recursive` does, and the tree is what a recursive clone through the same mirror checks out."""
    import os
    import subprocess

    root, commits = paper
    mirror = root / "mirror/paper-lab"
    deep = one_file_repository(root, "deep", "deep.txt", "deep-ok\n")
    helper = root / "work-helper"
    git("submodule", "add", "-q", str(mirror / "deep.git"), "third_party/deep", cwd=helper)
    git("config", "-f", ".gitmodules", "submodule.third_party/deep.url", "../deep.git", cwd=helper)
    git("add", ".", cwd=helper)
    git("commit", "-qm", "a submodule of its own", cwd=helper)
    git("push", "-q", str(mirror / "helper.git"), "HEAD:refs/heads/main", cwd=helper)
    work = root / "work-paper"
    helper2 = git("rev-parse", "HEAD", cwd=helper)
    git("update-index", "--cacheinfo", f"160000,{helper2},third/helper", cwd=work)
    git("commit", "-qm", "helper moved on", cwd=work)
    git("push", "-q", str(mirror / "fastop.git"), "HEAD:refs/heads/main", cwd=work)
    now = {"paper": git("rev-parse", "HEAD", cwd=work), "helper": helper2}
    recipe = read.load(str(write_recipe(root / "r" / "fastop", now)))
    got = trees.prepare(recipe, root / "tree")["fastop"]
    nested = {"third/helper": helper2, "third/helper/third_party/deep": git("rev-parse", "HEAD", cwd=deep)}
    assert got["submodules"] == nested
    assert (root / "tree/third/helper/third_party/deep/deep.txt").read_text() == "deep-ok\n"
    assert sorted(p.name for p in (root / "cache/recipes/objects").iterdir()) == [
        "github.com_paper-lab_deep.git", "github.com_paper-lab_fastop.git", "github.com_paper-lab_helper.git"]

    def run(*args: str, cwd: Path) -> str:
        return subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, check=True, text=True,
                              capture_output=True, env={**os.environ, "HOME": str(root)}).stdout
    run("clone", "-q", "--recurse-submodules", "https://github.com/paper-lab/fastop", "clone", cwd=root)
    status = run("submodule", "status", "--recursive", cwd=root / "clone")
    assert {line.split()[1]: line.split()[0].lstrip("+-") for line in status.splitlines()} == nested
    assert run("ls-files", cwd=root / "tree/third/helper") == run("ls-files", cwd=root / "clone/third/helper")


@pytest.mark.parametrize("base, url, want", [
    ("https://github.com/a/b", "../c.git", "https://github.com/a/c.git"),
    ("https://github.com/a/b.git", "./c", "https://github.com/a/b.git/c"),
    ("https://github.com/a/b/", "../../x/c", "https://github.com/x/c"),
    ("git@github.com:a/b", "../../c", "git@github.com:c"),
    ("https://github.com/a/b", "https://gitlab.com/c", "https://gitlab.com/c"),
])
def test_a_relative_submodule_url_is_resolved_against_its_parents_as_git_does(base, url, want):
    assert sources._resolve(base, url) == want


def test_a_patch_that_does_not_apply_names_file_and_line(paper):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    (folder / "patches/speed.diff").write_text((folder / "patches/speed.diff").read_text().replace("SPEED=2", "SPEED=3"))
    recipe = read.load(str(folder))
    sources.fetch(recipe.sources[0])
    with pytest.raises(RecipeError, match=r"patch patches/speed.diff does not apply to fastop at build.sh line 1") as e:
        trees.check_patches(recipe)
    # The hint points at a checkout of the user's own, not at the cache every build copies.
    where = Path(re.search(r" in (\S+) \(a checkout of yours", str(e.value)).group(1))
    assert where.is_dir() and not where.is_relative_to(sources.object_store(recipe.sources[0]))
    assert "SPEED=2" in (where / "build.sh").read_text()
    assert git("status", "--porcelain", cwd=where) == "" and git("rev-parse", "HEAD", cwd=where) == commits["paper"]


class _runner:
    """A place that answers each case's job with the output scripted for its n, and records the jobs' argv."""

    def __init__(self, outputs: dict[str, str], calls: list[list[str]], code: int = 0):
        self.outputs, self.calls, self.code = outputs, calls, code

    def run(self, job) -> int:
        self.calls.append(list(job.argv))
        n = re.search(r"bench.sh (\d+)|baseline.sh (\d+)", job.argv[-1])
        job.output.write_text(self.outputs.get(n.group(1) or n.group(2), "") if n else "")
        assert job.scratch == job.output.parent and job.timeout > 0
        return self.code


def test_metrics_are_extracted_per_repeat_and_a_case_runs_in_its_folder(tmp_path):
    recipe = read.load(str(write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})))
    calls: list[list[str]] = []
    cases = experiments.run_all([recipe.experiment("fastop")], {}, raw=tmp_path / "raw",
                                quick=False, place=_runner({"10": "max diff: 0.001\ntime: 20 ms\n",
                                                             "20": "max diff: 0.5\ntime: 40 ms\n"}, calls),
                                out=open("/dev/null", "w"))
    assert len(calls) == 4 and calls[0][-1].startswith("cd /src/.\nbash bench.sh 10")
    assert [c.metrics for c in cases] == [{"time_ms": 20.0}, {"time_ms": 40.0}]
    assert cases[0].sane and not cases[1].sane and cases[1].sanity[0].value == 0.5
    assert (tmp_path / "raw/fastop/fastop-n10-r2.txt").read_text().endswith("time: 20 ms\n")


def test_a_metric_that_matches_nothing_names_the_experiment_and_the_last_lines(tmp_path):
    recipe = read.load(str(write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})))
    cases = experiments.run_all([recipe.experiment("fastop")], {}, raw=tmp_path / "raw",
                                quick=True, place=_runner({"10": "segfault somewhere\n"}, []), out=open("/dev/null", "w"))
    assert cases[0].problem.startswith("fastop {'n': 10}: metric time_ms (/time: ([0-9.]+) ms/) matched nothing")
    assert "segfault somewhere" in cases[0].problem


def test_a_failing_or_timed_out_case_is_recorded_and_the_run_goes_on(tmp_path):
    recipe = read.load(str(write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})))
    cases = experiments.run_all(list(recipe.experiments), {}, raw=tmp_path / "raw", quick=True,
                                place=_runner({}, [], code=experiments.TIMED_OUT), out=open("/dev/null", "w"))
    assert len(cases) == 2 and "timed out after 60 s" in cases[0].problem and "timed out after 600 s" in cases[1].problem
    assert len(cases[0].runs) == 1  # a failed repeat stops that case's repeats


def _case(exp: str, n: int, ms: float | None, sane: bool = True, problem: str | None = None) -> Case:
    return Case(exp, {"n": n}, metrics={} if ms is None else {"time_ms": ms},
                sanity=[Checked("max_diff", 0.001 if sane else 0.5, "<= 0.01", sane)],
                problem=problem, runs=[ONE_RUN])


@pytest.fixture
def fastop(tmp_path) -> model.Recipe:
    return read.load(str(write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})))


def test_ratio_claims_are_judged_against_the_baseline_of_the_same_run(fastop):
    # claims: n10 5.0x, n20 20x (tolerance 10%)
    cases = [_case("fastop", 10, 20), _case("baseline", 10, 100), _case("fastop", 20, 12), _case("baseline", 20, 200)]
    n10, n20 = claims.judge(fastop, cases, gpu_name="NVIDIA H100 80GB HBM3")
    assert (n10.verdict, n10.claimed, n10.measured) == ("reproduced", 5.0, 5.0)
    assert n20.verdict == "not reproduced" and round(n20.measured, 2) == 16.67
    cases[2] = _case("fastop", 20, 9.5)   # 21x measured against 20x claimed
    assert claims.judge(fastop, cases, gpu_name="H100")[1].verdict == "reproduced"
    cases[2] = _case("fastop", 20, 10.8)  # 18.5x: short by 7.4%, inside the 10% tolerance
    assert claims.judge(fastop, cases, gpu_name="H100")[1].verdict == "within tolerance"


def test_a_fast_wrong_answer_is_not_reproduced_and_keeps_its_measured_value(fastop):
    cases = [_case("fastop", 10, 10, sane=False), _case("baseline", 10, 100)]
    v = claims.judge(fastop, cases, gpu_name="H100")[0]
    assert v.verdict == "not reproduced" and v.measured == 10.0 and "sanity failed" in v.why and "max_diff = 0.5" in v.why


def test_claims_whose_cases_did_not_run_say_why(fastop):
    cases = [_case("fastop", 10, 20), _case("fastop", 20, None, problem="fastop {'n': 20} exited with code 3; ...")]
    n10, n20 = claims.judge(fastop, cases, gpu_name="H100")
    assert n10.verdict == "not run" and "baseline baseline did not run" in n10.why
    assert n20.verdict == "not run" and "exited with code 3" in n20.why
    made = claims.judge(fastop, cases, gpu_name="H100", stand_ins={"baseline": "graph was a stand-in: random"})
    assert {v.verdict for v in made} == {"not run"} and all("stand-in data (graph was a stand-in" in v.why for v in made)


def test_absolute_claims_are_judged_only_on_the_papers_gpu_model(tmp_path):
    recipe = read.load(str(write_recipe(tmp_path / "f", {"paper": "a" * 40, "helper": "b" * 40}, extra=ABSOLUTE)))
    cases = [_case("fastop", 10, 20), _case("baseline", 10, 100)]
    on_h100 = claims.judge(recipe, cases, gpu_name="NVIDIA H100 80GB HBM3")[2]
    assert on_h100.verdict == "not run" and "only on the paper's A100" in on_h100.why and on_h100.measured == 20
    assert claims.judge(recipe, cases, gpu_name="NVIDIA A100-SXM4-80GB")[2].verdict == "reproduced"
    assert claims.same_gpu_model("A100", "NVIDIA A100-SXM4-40GB") and not claims.same_gpu_model("A10", "NVIDIA A100")
    assert claims.same_gpu_model("A6000", "NVIDIA RTX A6000"), "the one word docs/recipes.md tells a reader to write"


def test_check_builds_and_fetches_nothing_and_is_fast(tmp_path, monkeypatch):
    from kernellab.recipes import reproduce

    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    text = reproduce.check("demo")
    assert "is valid" in text and "target cpu" in text and "patches: 2 (apply cleanly)" in text
    assert (tmp_path / "recipes" / "folders.git").is_dir(), "the demo's own folders, made into commits"
    assert not (tmp_path / "recipes" / "objects").exists(), "nothing fetched"


#: The requirements of a CUDA-only paper (the shape of a real one): its archs, GPU memory, RAM and disk.
CUDA_ONLY = """
[requirements]
archs = ["7.0", "7.5", "8.0", "9.0"]
gpu_memory_gb = 8
ram_gb = 8
disk_gb = 6
"""


@pytest.fixture
def cuda_paper(tmp_path) -> model.Recipe:
    folder = write_recipe(tmp_path / "cudapaper", {"paper": "a" * 40, "helper": "b" * 40}, target="cu124-debian",
                          extra=CUDA_ONLY)
    return read.load(str(folder))


def test_a_target_with_archs_the_code_does_not_support_is_refused_before_anything_is_built(cuda_paper):
    from kernellab.recipes import build

    recipe = cuda_paper
    with pytest.raises(RecipeError, match=r"target cu130-pip builds for sm_86, sm_89, which recipe cudapaper's "
                                          r"code does not support"):
        build.resolve_target(recipe, "cu130-pip")
    with pytest.raises(RecipeError, match=r"target cpu has no CUDA"):
        build.resolve_target(recipe, "cpu")


def test_a_record_is_written_read_back_and_compared(tmp_path, fastop):
    from kernellab.recipes import record

    cases = [_case("fastop", 10, 20), _case("baseline", 10, 100)]
    verdicts = claims.judge(fastop, cases, gpu_name="H100")
    from kernellab.provenance import Machine
    from kernellab.recipes.manifest import Manifest

    made_of = Manifest("fastop", "1" * 64, "cpu", "sha256:" + "2" * 64,
                       {"fastop": {"url": "x", "commit": "a" * 40, "submodules": {}}}, [], {"jobs": 2})
    run = record.new(fastop, manifest=made_of, image_id="sha256:" + "0" * 64, machine=Machine(None),
                     cases=cases, verdicts=verdicts)
    record.write(tmp_path, run)
    back = record.load(tmp_path)
    assert back == run   # the one type, written and read back whole
    assert back.cases[0].metrics == {"time_ms": 20} and back.claims[0].verdict == "reproduced"
    assert back.units == {"time_ms": "ms"} and back.image.target == "cpu" and back.values == {"jobs": 2}
    assert "| n10 speedup | 5x (table 1) | 5x | **reproduced** |" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1].startswith('fastop,"{""n"": 10}",time_ms,20')
    assert (tmp_path / "claims.png").stat().st_size > 1000
    assert "| fastop | n=10 | time_ms | 20 | 20 | 1.000 |" in record.compare(back, back)
    with pytest.raises(RecipeError, match="is not a recipe run"):
        record.load(tmp_path / "nothing")


def test_the_gitmodules_url_is_the_public_one(paper):
    root, _ = paper
    assert "https://github.com/paper-lab/helper" in (Path(root) / "work-paper/.gitmodules").read_text()


def _gpu(cc: str = "9.0", mib: int = 81559, name: str = "NVIDIA H100 80GB HBM3"):
    from kernellab.gpu import HostGpu

    return HostGpu(0, name, "GPU-0", cc, "580.159.04", mib)


def test_a_machine_short_of_what_the_code_needs_is_refused_in_one_sentence(monkeypatch, tmp_path, cuda_paper):
    from kernellab.recipes import checks

    recipe = cuda_paper   # its code: sm_70/75/80/90, 8 GB of GPU memory, 8 GB RAM, 6 GB disk
    built = ("8.0", "9.0")  # what cu124-debian builds it for: the GPUs a run can use
    assert checks.check_host(recipe, gpus=[_gpu()], run=True, built=built) == []
    with pytest.raises(RecipeError, match=r"GPU 0 \(NVIDIA GeForce RTX 3090, sm_86\) is not one recipe "
                                          r"cudapaper's code supports .*; run on another GPU"):
        checks.check_host(recipe, gpus=[_gpu("8.6", 24576, "NVIDIA GeForce RTX 3090")], run=True, built=built)
    # Its code supports a V100, but this image holds no code for one: the list is the image's, not the recipe's.
    with pytest.raises(RecipeError, match=r"GPU 0 \(Tesla V100-SXM2-32GB, sm_70\) is not one the recipe's image holds "
                                          r"code for \(sm_80, sm_90\)"):
        checks.check_host(recipe, gpus=[_gpu("7.0", 32768, "Tesla V100-SXM2-32GB")], run=True, built=built)
    with pytest.raises(RecipeError, match=r"GPU 0 \(NVIDIA A100\) has 4 GB and recipe cudapaper needs 8 GB"):
        checks.check_host(recipe, gpus=[_gpu("8.0", 4096, "NVIDIA A100")], run=True, built=built)
    with pytest.raises(RecipeError, match=r"image holds GPU code for sm_80, sm_90 and this machine has no GPU"):
        checks.check_host(recipe, gpus=[], run=True, built=built)
    note = checks.check_host(recipe, gpus=[], built=built)[0]   # a build needs none
    assert note == "no GPU here: building works, running needs a GPU it holds code for: sm_80, sm_90"
    assert checks.check_host(recipe, gpus=[], run=True) == [], "a CPU target's run needs no GPU"
    monkeypatch.setattr(checks, "host_ram_gb", lambda: 4.0)
    with pytest.raises(RecipeError, match=r"needs 8 GB of host RAM and this machine has 4.0 GB"):
        checks.check_host(recipe, gpus=[_gpu()])
    monkeypatch.setattr(checks, "host_ram_gb", lambda: 64.0)
    monkeypatch.setattr(checks, "free_disk_gb", lambda path: 3.0)
    with pytest.raises(RecipeError, match=r"needs 6 GB free for its build \(beyond its target image\) and .* has 3.0 GB"):
        checks.check_host(recipe, gpus=[_gpu()], disk=tmp_path)


def test_gpu_mode_none_is_refused_where_every_case_would_fail_without_a_gpu(cuda_paper):
    from kernellab.recipes import build, checks

    cuda_spec, _ = build.resolve_target(cuda_paper, "cu124-debian")
    with pytest.raises(RecipeError, match=r"--gpu-mode none runs recipe cudapaper's cases without a GPU, and target "
                                          r"cu124-debian builds GPU code \(CUDA 12.4\): every case would fail"):
        checks.check_gpu_mode(cuda_paper, cuda_spec, False)
    checks.check_gpu_mode(cuda_paper, cuda_spec, True)
    demo = read.load("demo")
    cpu_spec, _ = build.resolve_target(demo, "cpu")
    checks.check_gpu_mode(demo, cpu_spec, False)   # a CPU target: its cases need no GPU
    with pytest.raises(RecipeError, match=r"or with --target cpu for its CPU experiments"):
        checks.check_gpu_mode(demo, build.resolve_target(demo, "cu124-debian")[0], False)


def test_check_lists_the_values_a_step_may_use(tmp_path, monkeypatch):
    from kernellab.recipes import reproduce

    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    text = reproduce.check("demo", target="cu124-debian")
    assert "{gencode} = -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90" in text
    assert "{use_cuda} = ON" in text and "{cuda_archs} = 80;90" in text
    assert all(f"{{{k}}} = " in text for k in ("python", "torch", "cxx11_abi", "llvm_config", "cuda_stub", "jobs"))


def test_an_unknown_target_in_a_recipe_names_its_file_and_key(tmp_path):
    from kernellab.recipes import build

    folder = write_recipe(tmp_path / "typo", {"paper": "a" * 40, "helper": "b" * 40}, target="cu124-debain")
    with pytest.raises(RecipeError, match=r"typo/recipe.toml: environment.target: unknown target `cu124-debain` "
                                          r"\(did you mean cu124-debian\?\)"):
        build.resolve_target(read.load(str(folder)))


def test_the_task_says_what_it_wants_in_one_sentence_with_exit_code_2():
    import subprocess
    import sys

    from conftest import ROOT

    def invoke(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True)

    r = invoke("recipe", "rn", "demo")
    assert r.returncode == 2 and "`invoke recipe rn` is not a verb; use one of list, check, build, run" in r.stderr
    r = invoke("recipe", "check", "demoo")
    assert r.returncode == 2 and "did you mean `demo`?" in r.stderr and "Traceback" not in r.stderr
    r = invoke("recipe", "run", "demo", "-k", "nothing_like_it")
    assert r.returncode == 2 and "-k 'nothing_like_it' matches no experiment of recipe demo" in r.stderr
    assert "demo" in invoke("recipes").stdout and "demo" in invoke("recipe", "list").stdout
    r = invoke("recipe", "check")
    assert r.returncode == 2 and "`invoke recipe check` needs a recipe: `invoke recipe check NAME`" in r.stderr


def test_a_cluster_task_runs_one_experiment_and_the_submitter_judges_each_gpu_type(tmp_path, monkeypatch):
    """kernellab.recipes.on_node as a cluster node runs it (here natively: bash stands in for the image), then
    kernellab.recipes.on_cluster.merge: one record per GPU type, claims judged on that type's GPU."""
    from kernellab import jobs
    from kernellab.cluster import plan
    from kernellab.recipes import on_cluster, on_node

    folder = write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})
    (part,) = jobs.recipe_run(str(folder), ["fastop"], quick=True).parts()
    argv, env = plan.task_argv(part.argv, "run1", "h100", "fastop")
    # The task's command line is the job's part (kernellab.jobs.recipe_run), like every other cluster task's.
    assert argv == ["python", "-m", "kernellab.recipes.on_node", str(folder), "fastop", "--quick", "--out",
                    "results/run1/h100/fastop"] and env["KERNELLAB_GPU_TYPE"] == "h100"
    src = tmp_path / "src"   # the image's /src: the fixture's bench.sh with the patch applied
    src.mkdir()
    (src / "out").mkdir()
    (src / "out" / "config").write_text("SPEED=5\n")
    (src / "bench.sh").write_text('. out/config\necho "max diff: 0.001"\necho "time: $(( $1 * 10 / SPEED )) ms"\n')
    monkeypatch.setattr(on_node, "IN_IMAGE", tmp_path / "no-image")
    monkeypatch.setattr(on_node, "MANIFEST", tmp_path / "no-manifest.json")
    from kernellab.places import Native

    class InSrc:  # the Native place a task runs its cases in, with /src/<cwd> of the image at tmp_path/src
        def run(self, job):
            line = job.argv[-1].replace("cd /src/.", f"cd {src}").replace("/recipe/", f"{folder}/")
            return Native().run(dataclasses.replace(job, argv=(*job.argv[:-1], line)))

    local = tmp_path / "run"
    for gpu in ("h100", "a100"):
        for exp in ("fastop", "baseline"):
            assert on_node.main([str(folder), exp, "--out", str(local / gpu / exp)], place=InSrc()) == 0
    out = json.loads((local / "h100" / "fastop" / "cases.json").read_text())
    assert out["recipe"] == str(folder) and [c["metrics"] for c in out["cases"]] == [{"time_ms": 20.0}, {"time_ms": 40.0}]
    from kernellab.cluster.follow import Outcome
    from kernellab.cluster.plan import Task

    table = on_cluster.merge(local, ["h100", "a100"], [Outcome(Task(g, 0, name, []), "done", "", status) for g, name, status in [
        ("h100", "fastop", {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}), ("h100", "baseline", {}),
        ("a100", "fastop", {"gpus": [{"name": "NVIDIA A100-SXM4-80GB"}]}), ("a100", "baseline", {})]])
    assert "| n10 speedup | 5x (A100) | 5x (reproduced) | 5x (reproduced) |" in table
    assert "| n20 speedup | 20x (A100) | 5x (not reproduced) | 5x (not reproduced) |" in table
    for gpu in ("h100", "a100"):
        assert json.loads((local / gpu / "run.json").read_text())["claims"][0]["verdict"] == "reproduced"


def test_the_recipe_lock_decides_the_pip_versions_and_is_not_part_of_the_recipes_hash(paper):
    import io

    from kernellab.recipes import pins as lock

    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits, pip=("klpin>=1.0",))
    recipe = read.load(str(folder))
    out = io.StringIO()
    assert lock.chosen(recipe, "cpu", "prefer", out) is None  # no lock yet: resolve
    with pytest.raises(RecipeError, match=r"--locked: recipe fastop has no lock for target cpu .*build it once"):
        lock.chosen(recipe, "cpu", "strict", out)
    before = recipe.digest()
    written = lock.write(recipe, "cpu", "spec", lock.parse_added("klpin==1.0\nother @ file:///x\nzz==2.0rc1\n"))
    assert written == folder / "locks" / "cpu.json" and recipe.digest() == before
    assert lock.write(recipe, "cpu", "spec", {"klpin": "1.0", "zz": "2.0rc1"}) is None  # unchanged: not rewritten
    assert lock.chosen(recipe, "cpu", "prefer", out) == ["klpin==1.0", "zz==2.0rc1"]
    assert lock.chosen(recipe, "cpu", "update", out) is None
    assert lock.fits(recipe, "cpu", {"klpin": "1.0", "zz": "2.0rc1"}) and not lock.fits(recipe, "cpu", {"klpin": "1.1"})
    changed = read.load(str(write_recipe(folder, commits, pip=("klpin>=1.1",))))
    assert lock.chosen(changed, "cpu", "prefer", out) is None and "another pip list" in out.getvalue()
    with pytest.raises(RecipeError, match=r"written for pip \['klpin>=1.0'\], the recipe now asks for \['klpin>=1.1'\]"):
        lock.chosen(changed, "cpu", "strict", out)
    written.write_text('{"pip": []}')
    with pytest.raises(RecipeError, match=r"is not a recipe lock .*--update"):
        lock.chosen(changed, "cpu", "prefer", out)


# --------------------------------------------------------------------------- folder sources (the demo's kind)

def _folder_recipe(root: Path, commit: str, *, extra_source: str = "") -> Path:
    folder = root / "mine"
    (folder / "code").mkdir(parents=True, exist_ok=True)
    (folder / "code" / "run.sh").write_text('echo "time: 5 ms"\n')
    (folder / "recipe.toml").write_text(f'''
[paper]
title = "Mine"
venue = "TEST"
year = 2026
link = "code/README"
[environment]
target = "cpu"
[[sources]]
name = "code"
path = "code"
commit = "{commit}"
{extra_source}
[[experiments]]
name = "mine"
run = "bash run.sh"
metrics = [{{ name = "time_ms", regex = 'time: ([0-9.]+) ms' }}]
[paper.x]
''')
    text = (folder / "recipe.toml").read_text().replace("[paper.x]\n", "")
    (folder / "recipe.toml").write_text(text.replace('link = "code/README"', 'link = "code/README"\nno_claims = "a test"'))
    return folder


def test_a_folder_source_is_a_commit_of_its_files_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    a = tmp_path / "a"
    a.mkdir()
    (a / "x.c").write_text("int main(void) { return 0; }\n")
    (a / "sub").mkdir()
    (a / "sub" / "y.h").write_text("#define Y 1\n")
    first = sources.folder_commit(a)
    b = tmp_path / "elsewhere" / "b"
    import shutil
    import time
    shutil.copytree(a, b)
    time.sleep(0.01)
    (b / "x.c").touch()
    (b / "__pycache__").mkdir()
    (b / "__pycache__" / "m.pyc").write_bytes(b"\0")
    assert re.fullmatch(r"[0-9a-f]{40}", first)
    assert sources.folder_commit(b) == first, "another place, another mtime, a __pycache__: the same commit"
    (b / "sub" / "y.h").write_text("#define Y 2\n")
    assert sources.folder_commit(b) != first, "a changed file is a changed commit"


def test_a_folder_source_whose_files_changed_since_the_pin_is_refused_naming_the_new_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    folder = _folder_recipe(tmp_path, "0" * 40)
    made = sources.folder_commit(folder / "code")
    folder = _folder_recipe(tmp_path, made)
    recipe = read.load(str(folder))
    assert recipe.sources[0].origin.endswith("mine/code")
    got = sources.fetch(recipe.sources[0])
    assert got["commit"] == made and got["url"] == recipe.sources[0].origin
    trees.prepare(recipe, tmp_path / "tree")
    assert (tmp_path / "tree" / "run.sh").read_text() == 'echo "time: 5 ms"\n'
    (folder / "code" / "run.sh").write_text('echo "time: 1 ms"\n')   # edited, pin not
    with pytest.raises(RecipeError, match=rf"source code's folder .*mine/code is commit [0-9a-f]{{40}} now, not the "
                                          rf"recipe's {made}: its files changed since the recipe pinned them"):
        trees.prepare(recipe, tmp_path / "tree2")
    with pytest.raises(RecipeError, match="its files changed"):
        sources.fetch(recipe.sources[0])   # a fetched folder source is checked again on every fetch


@pytest.mark.parametrize("source, words", [
    ('url = "https://example.org/x"', r"sources\[0\]\.url or path must say where the source comes from \(one of them"),
    ('submodules = { "a" = "' + "c" * 40 + '" }', r"sources\[0\]\.submodules belong to a git URL's source"),
])
def test_a_folder_source_takes_a_path_or_a_url_never_both(tmp_path, source, words):
    folder = _folder_recipe(tmp_path, "0" * 40, extra_source=source)
    with pytest.raises(RecipeError, match=words):
        read.load(str(folder))


def test_a_folder_source_outside_its_recipe_is_refused(tmp_path):
    folder = _folder_recipe(tmp_path, "0" * 40)
    (folder / "recipe.toml").write_text((folder / "recipe.toml").read_text().replace('path = "code"', 'path = "../.."'))
    with pytest.raises(RecipeError, match=r"sources\[0\]\.path must be a folder inside .*, not '\.\./\.\.'"):
        read.load(str(folder))


def test_a_recipe_build_follows_a_committed_target_lock_and_never_rewrites_it(monkeypatch, fastop):
    """A recipe build once rewrote the tracked docker/locks/cu124-debian.json when Debian's archive had moved on."""
    from kernellab.errors import BuildError
    from kernellab.recipes import build

    seen: list[str] = []

    class NoImages:
        name = "docker"

        def require(self):
            return self

        def exists(self, ref):
            return False

        def find_image(self, ref):
            return None

    def fake_build(spec, **kw):
        seen.append(kw["lock"])
        raise BuildError("the archive no longer has gcc-12 12.2.0-14; nothing was built.")

    monkeypatch.setattr(build.builder, "build", fake_build)
    with pytest.raises(BuildError, match=r"never rewrites it: `invoke build-image --target cpu --update` resolves"):
        build.environment(fastop, engine=NoImages(), out=__import__("io").StringIO())
    assert seen == ["strict"], "docker/locks/cpu.json is committed: followed exactly"
    with pytest.raises(BuildError, match="nothing was built") as e:
        build.environment(fastop, target="cu128-blackwell", engine=NoImages(), out=__import__("io").StringIO())
    assert seen[-1] == "prefer" and "never rewrites" not in str(e.value), "no lock yet: resolved, and written"


def test_a_recipe_may_state_the_oldest_cuda_its_code_builds_with(tmp_path):
    from kernellab.recipes import build

    folder = write_recipe(tmp_path / "new", {"paper": "a" * 40, "helper": "b" * 40}, target="cu124-debian",
                          extra='[requirements]\nmin_cuda = "12.0"\n')
    recipe = read.load(str(folder))
    assert recipe.requirements.min_cuda == "12.0" and build.resolve_target(recipe)[0].cuda == "12.4"
    with pytest.raises(RecipeError, match=r"recipe new needs CUDA 12.0 or newer \(requirements.min_cuda\) and target "
                                          r"cu112-debian11 has CUDA 11.2; choose a target with CUDA 12.0 or newer"):
        build.resolve_target(recipe, "cu112-debian11")
    with pytest.raises(RecipeError, match=r"has no CUDA"):
        build.resolve_target(recipe, "cpu")
    bad = write_recipe(tmp_path / "bad", {"paper": "a" * 40, "helper": "b" * 40}, extra='[requirements]\nmin_cuda = "12"\n')
    with pytest.raises(RecipeError, match=r"requirements.min_cuda must be a CUDA version such as \"12.0\""):
        read.load(str(bad))


# --------------------------------------------------------------------------- the system as a package

def test_a_recipe_whose_system_is_a_package_names_it_at_one_version_and_offers_baselines(tmp_path):
    from kernellab.recipes import pins

    liger = read.load("liger")
    assert [p.requirement for p in liger.packages] == ["liger-kernel==0.8.5"] and not liger.sources
    assert liger.baselines == {op: liger.folder / "baselines" / f"{op}.py" for op in ("layernorm", "rmsnorm", "softmax")}
    assert liger.pip_all == ("liger-kernel==0.8.5",)
    # Its wheel, as pip's report has it, is checked against the lock: another file under the same version is refused.
    report = json.dumps({"install": [{"metadata": {"name": "liger_kernel", "version": "0.8.5"},
                                      "download_info": {"archive_info": {"hashes": {"sha256": "f" * 64}}}}]})
    got = pins.wheels(report, liger)
    assert got == {"liger-kernel": {"version": "0.8.5", "sha256": "f" * 64}}
    with pytest.raises(RecipeError, match=r"liger-kernel 0.8.5's wheel has sha256 f{64}, but .*locked 60789cd5"):
        pins.check_wheels(liger, "cu124-debian", got)
    pins.check_wheels(liger, "cu124-debian", {"liger-kernel": {"version": "0.8.5", "sha256": "60789cd576af073ab9b192b570d"
                                                                                           "2597fd0cdad489cd62fb44fb16256d43754c9"}})
    with pytest.raises(RecipeError, match=r"is not in what its pip layer installed"):
        pins.check_wheels(liger, "cu124-debian", {})
    # A new version of the package is a new wheel to lock, not a mismatch.
    newer = dataclasses.replace(liger, packages=(model.Package("liger-kernel", "0.8.6"),))
    pins.check_wheels(newer, "cu124-debian", {"liger-kernel": {"version": "0.8.6", "sha256": "e" * 64}})


@pytest.mark.parametrize("extra, message", [
    ('[[packages]]\nname = "liger-kernel"\nversion = ">=0.8"\n', r"packages\[0\].version is '>=0.8'; write one exact version"),
    ('[baselines]\nlayernorm = "nope.py"\n', r"baselines.layernorm names nope.py, which is not a file of the recipe"),
    ('[baselines]\nlayernorm = 3\n', r"baselines.layernorm names the adapter: a .py file of the recipe"),
])
def test_packages_and_baselines_are_checked_as_they_are_read(tmp_path, extra, message):
    folder = write_recipe(tmp_path / "bad", {"paper": "a" * 40, "helper": "b" * 40})
    text = (folder / "recipe.toml").read_text()
    (folder / "recipe.toml").write_text(text.replace("[[experiments]]", extra + "\n[[experiments]]", 1))
    with pytest.raises(RecipeError, match=message):
        read.load(str(folder))
