"""The execution root: a unit sees exactly the files its key hashed, and nothing else.

Unit tests of ``sandbox.py`` and the start-up guard, then end to end through nox in the
small real workspace: a test that opens an undeclared file fails, a file hidden by
``.git/info/exclude`` is never collected, and declared outputs come back.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import cache_key
import pytest
import sandbox
import targets
import units
from conftest import ROOT, run_nox
from test_cache_e2e import _env, _outcome

RNG = random.Random(20261201)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    repo, artifacts = tmp_path / "repo", tmp_path / "artifacts"
    files = {}
    for name in ("packages/a/src/a/__init__.py", "packages/a/tests/test_a.py", "tools/x.py"):
        data = RNG.randbytes(64)
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
        files[name] = _sha(data)
    (repo / "packages/a/tests/undeclared.py").write_text("secret = 1\n")
    artifacts.mkdir()
    bench = RNG.randbytes(32)
    (artifacts / "bench-x.json").write_bytes(bench)
    (artifacts / "other.json").write_text("{}")
    files["artifacts/bench-x.json"] = _sha(bench)
    return repo, artifacts, files


def test_the_root_holds_exactly_the_hashed_files(tmp_path: Path) -> None:
    repo, artifacts, files = _tree(tmp_path)
    root = sandbox.create(tmp_path / "sb", repo_root=repo, artifacts_dir=artifacts, files=files)
    found = {p.relative_to(root.root).as_posix() for p in root.root.rglob("*") if p.is_file()}
    assert found == set(files)
    for name, sha in files.items():
        assert _sha((root.root / name).read_bytes()) == sha
    assert root.artifacts == root.root / "artifacts"
    # a second creation starts from nothing: a leftover of the last run is gone
    (root.root / "packages/a/tests/leftover.py").write_text("x = 1\n")
    again = sandbox.create(tmp_path / "sb", repo_root=repo, artifacts_dir=artifacts, files=files)
    assert not (again.root / "packages/a/tests/leftover.py").exists()


def test_a_file_changed_after_hashing_is_refused(tmp_path: Path) -> None:
    repo, artifacts, files = _tree(tmp_path)
    (repo / "tools/x.py").write_text("changed after the key\n")
    with pytest.raises(sandbox.SandboxError, match=r"tools/x\.py changed after the cache key"):
        sandbox.create(tmp_path / "sb", repo_root=repo, artifacts_dir=artifacts, files=files)


def test_collect_keeps_declared_outputs_the_run_wrote(tmp_path: Path) -> None:
    repo, artifacts, files = _tree(tmp_path)
    root = sandbox.create(tmp_path / "sb", repo_root=repo, artifacts_dir=artifacts, files=files)
    (root.artifacts / "junit").mkdir()
    (root.artifacts / "junit" / "a.xml").write_text("<testsuite/>")
    (root.artifacts / "junit" / "b.xml").write_text("<testsuite/>")  # not declared
    (root.root / "report").mkdir()
    (root.root / "report" / "r.md").write_text("# report\n")
    os.symlink("/etc/passwd", root.root / "report" / "link.md")  # never an output
    declared = ["artifacts/junit/a.xml", "artifacts/bench-*.json", "report/*"]
    found = sandbox.collect(root, declared)
    # the copied-in bench input is unchanged, so it is no output of this run
    assert sorted(found) == ["artifacts/junit/a.xml", "report/r.md"]
    (root.artifacts / "bench-x.json").write_text('{"new": true}')
    assert "artifacts/bench-x.json" in sandbox.collect(root, declared)


def test_the_start_up_guard_hides_the_real_sources(tmp_path: Path) -> None:
    real, copy = tmp_path / "real" / "src", tmp_path / "copy" / "src"
    for folder, text in ((real, "where = 'real'\n"), (copy, "where = 'copy'\n")):
        (folder / "pkg_demo").mkdir(parents=True)
        (folder / "pkg_demo" / "__init__.py").write_text(text)
    (real / "stray_demo.py").write_text("where = 'unhashed'\n")
    # A venv whose .pth file puts the real folder on sys.path, as an editable install does.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "_editable_demo.pth").write_text(str(real) + "\n")
    probe = ("import importlib.util as u, pkg_demo; "
             "print(pkg_demo.where, u.find_spec('stray_demo') is not None)")
    base = {"PATH": os.environ["PATH"],
            "PYTHONPATH": os.pathsep.join([str(sandbox.SITE_DIR), str(copy)])}

    def run(env: dict[str, str]) -> list[str]:
        done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], env=env,
                              capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert run(base) == ["copy", "True"]  # the .pth leaks the unhashed module
    assert run({**base, sandbox.HIDE_VARIABLE: str(real)}) == ["copy", "False"]


def test_meta_is_keyed_by_every_package_declaration(tmp_path: Path) -> None:
    graph = targets.load(ROOT)
    meta = units.repo_units(graph)["meta"]
    assert set(units.META_INPUTS) <= set(meta.inputs)
    repo = tmp_path / "r"
    for name in ("a", "b"):
        (repo / "packages" / name).mkdir(parents=True)
        (repo / "packages" / name / "pyproject.toml").write_text(f"[project]\nname = '{name}'\n")
    (repo / "packages" / "b" / "other.toml").write_text("x = 1\n")
    before = cache_key.file_component("inputs", cache_key.SourceTree(repo), ["packages/*/pyproject.toml"])
    assert sorted(before.files) == ["packages/a/pyproject.toml", "packages/b/pyproject.toml"]
    (repo / "packages" / "b" / "pyproject.toml").write_text("[project]\nname = 'b2'\n")
    after = cache_key.file_component("inputs", cache_key.SourceTree(repo), ["packages/*/pyproject.toml"])
    assert after.digest != before.digest


def test_meta_carries_the_files_that_make_family_members(tmp_path: Path) -> None:
    # meta's tests load the target graph inside its execution root; without the files a
    # family's `each` matched, the family has no member there and the load fails.
    graph = targets.load(ROOT)
    meta = units.repo_units(graph)["meta"]
    assert graph.family_files, "the repository declares target families"
    assert set(graph.family_files) <= set(meta.inputs)
    bench = [t for t in graph.targets.values() if t.name.endswith("-bench")]
    assert {f"packages/evals/src/dsv4_evals/bench/{t.name[:-len('-bench')]}/gates.py"
            for t in bench if t.package.dist == "dsv4-evals"} <= set(graph.family_files)


def test_gpu_driver_variables_are_keyed() -> None:
    graph = targets.load(ROOT)
    gpu_unit = units.target_unit(graph, graph.targets["kernels-gpu"])
    for name in ("LD_LIBRARY_PATH", "CUDA_HOME", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH"):
        assert name in gpu_unit.variables
    assert "LD_LIBRARY_PATH" not in units.target_unit(graph, graph.targets["policy"]).variables


# --------------------------------------------------------------------------- through nox
def _commit(repo: Path, message: str) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", message], cwd=repo, check=True)


def test_an_undeclared_file_is_absent_until_declared(mini_repo: Path, tmp_path: Path) -> None:
    (mini_repo / "notes.txt").write_text("shared notes\n")
    (mini_repo / "packages" / "alpha" / "tests" / "test_notes.py").write_text(
        "from pathlib import Path\n\n\ndef test_notes():\n"
        "    assert Path(__file__).parents[3].joinpath('notes.txt').read_text()\n")
    _commit(mini_repo, "a test that reads a file outside its package")
    failed = run_nox(mini_repo, "-s", "alpha", env=_env(tmp_path, "a"))
    text = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "FileNotFoundError" in text and "notes.txt" in text
    pyproject = mini_repo / "packages" / "alpha" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        "timeout = 120", 'timeout = 120\ninputs = ["//notes.txt"]'))
    assert _outcome(run_nox(mini_repo, "-s", "alpha", env=_env(tmp_path, "a"))) == {
        "alpha": "ran"}


def test_a_file_hidden_by_git_exclude_is_never_collected(mini_repo: Path, tmp_path: Path) -> None:
    hidden = mini_repo / "packages" / "alpha" / "tests" / "test_hidden.py"
    hidden.write_text("def test_hidden():\n    raise AssertionError('an unhashed test ran')\n")
    (mini_repo / ".git" / "info").mkdir(exist_ok=True)
    with (mini_repo / ".git" / "info" / "exclude").open("a") as handle:
        handle.write("test_hidden.py\n")
    result = run_nox(mini_repo, "-s", "alpha", env=_env(tmp_path, "a"))
    assert _outcome(result) == {"alpha": "ran"}
    junit = (mini_repo / "artifacts" / "junit" / "alpha.xml").read_text()
    assert 'tests="1"' in junit and "test_hidden" not in junit
    # the same file, no longer excluded, is hashed: the key changes and it runs (and fails)
    (mini_repo / ".git" / "info" / "exclude").write_text("")
    shown = run_nox(mini_repo, "-s", "alpha", env=_env(tmp_path, "a"))
    assert shown.returncode != 0 and "an unhashed test ran" in shown.stdout + shown.stderr


def test_only_declared_outputs_come_back(mini_repo: Path, tmp_path: Path) -> None:
    (mini_repo / "packages" / "alpha" / "tests" / "test_writes.py").write_text(
        "import os\nfrom pathlib import Path\n\n\ndef test_writes():\n"
        "    out = Path(os.environ['DSV4_ARTIFACTS_DIR'])\n"
        "    (out / 'stray.json').write_text('{}')\n"
        "    Path(__file__).parents[3].joinpath('written-by-test.txt').write_text('x')\n")
    _commit(mini_repo, "a test that writes undeclared files")
    assert _outcome(run_nox(mini_repo, "-s", "alpha", env=_env(tmp_path, "a"))) == {
        "alpha": "ran"}
    assert (mini_repo / "artifacts" / "junit" / "alpha.xml").is_file()
    assert not (mini_repo / "artifacts" / "stray.json").exists()
    assert not (mini_repo / "written-by-test.txt").exists()
