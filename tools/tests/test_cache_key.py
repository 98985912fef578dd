"""The content key: what changes it, and what must not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cache_key
import pytest
from lockfile import Lock, LockError

LOCK = """
version = 1
[[package]]
name = "app"
version = "0.1.0"
source = { editable = "packages/app" }
dependencies = [{ name = "httpx", extra = ["http2"] }]
[package.dev-dependencies]
test = [{ name = "pytest" }]
lint = [{ name = "ruff" }]

[[package]]
name = "httpx"
version = "0.28.1"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "idna" }]
[package.optional-dependencies]
http2 = [{ name = "h2" }]
wheels = [{ url = "https://x.invalid/httpx.whl", hash = "sha256:11" }]

[[package]]
name = "idna"
version = "3.10"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://x.invalid/idna.tar.gz", hash = "sha256:22" }

[[package]]
name = "h2"
version = "4.2.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "pytest"
version = "8.4.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "ruff"
version = "0.12.0"
source = { registry = "https://pypi.org/simple" }
"""


def _lock(text: str = LOCK) -> Lock:
    import tomllib

    return Lock(tomllib.loads(text), "test.lock")


def test_closure_follows_dependencies_extras_and_groups() -> None:
    names = [p.name for p in _lock().closure("app", ["test"])]
    assert names == ["app", "h2", "httpx", "idna", "pytest"]
    assert "ruff" not in names  # another group's pins are another environment's


def test_closure_records_hashes_and_editability() -> None:
    by_name = {p.name: p for p in _lock().closure("app", ["test"])}
    assert by_name["app"].editable and not by_name["httpx"].editable
    assert by_name["idna"].hashes == ("sha256:22",)


def test_unknown_group_and_package_are_named() -> None:
    with pytest.raises(LockError, match=r"app has no locked group 'bench'; locked groups: lint, test"):
        _lock().closure("app", ["bench"])
    with pytest.raises(LockError, match="nothere is not in the lock"):
        _lock().closure("nothere")


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "packages" / "app" / "src").mkdir(parents=True)
    (root / "packages" / "other").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "packages" / "app" / "src" / "m.py").write_text("X = 1\n")
    (root / "packages" / "other" / "o.py").write_text("Y = 2\n")
    (root / "tools" / "t.py").write_text("Z = 3\n")
    (root / "noxfile.py").write_text("# nox\n")
    (root / ".gitignore").write_text("ignored.txt\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _key(root: Path, *, lock: Lock | None = None, env=None, args=(), hermetic=True,
         set_env=None, gpu=None, needs_gpu=False) -> cache_key.Key:
    inputs = cache_key.KeyInputs(
        root=root, tree=cache_key.SourceTree(root), lock=lock or _lock(),
        outer_env=env or {}, hermetic=hermetic, gpu=gpu,
    )
    return cache_key.compute(
        name="app", declaration={"name": "app", "pytest": ["tests"]},
        package_folders={"app": root / "packages" / "app"}, lock_slices=[("app", ["test"])],
        variables=["APP_MODE"], set_env=set_env or {}, keyed_by_gpu=needs_gpu, extra_paths=(),
        arguments=list(args), inputs=inputs,
    )


def test_contents_change_the_key_but_mtimes_do_not(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    first = _key(root)
    source = root / "packages" / "app" / "src" / "m.py"
    os.utime(source, (1, 1))
    assert _key(root).digest == first.digest
    source.write_text("X = 2\n")
    changed = _key(root)
    assert changed.digest != first.digest
    assert [c.name for c in changed.components if c.digest != first.component_digests()[c.name]] == [
        "sources:app"
    ]


def test_files_outside_the_environment_and_ignored_files_do_not_count(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    first = _key(root).digest
    (root / "packages" / "other" / "o.py").write_text("Y = 3\n")
    (root / "packages" / "app" / "ignored.txt").write_text("scratch\n")
    assert _key(root).digest == first
    (root / "packages" / "app" / "new_test.py").write_text("untracked but not ignored\n")
    assert _key(root).digest != first


def test_build_definitions_change_every_key(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    first = _key(root)
    (root / "tools" / "t.py").write_text("Z = 4\n")
    assert _key(root).component_digests()["build"] != first.component_digests()["build"]


def test_variables_ci_set_env_and_arguments_change_the_key(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    base = _key(root).digest
    assert _key(root, env={"APP_MODE": "fast"}).digest != base
    assert _key(root, env={"CI": "true"}).digest != base
    assert _key(root, env={"UNRELATED": "x"}).digest == base
    assert _key(root, set_env={"TRITON_INTERPRET": "1"}).digest != base
    assert _key(root, args=["-k", "slow"]).digest != base


def test_only_the_environments_own_lock_slice_counts(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    base = _key(root).digest
    assert _key(root, lock=_lock(LOCK.replace('"0.12.0"', '"0.13.0"'))).digest == base  # ruff
    assert _key(root, lock=_lock(LOCK.replace('"3.10"', '"3.11"'))).digest != base  # idna


def test_a_non_hermetic_run_has_its_own_key(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    hermetic = _key(root, needs_gpu=True, gpu={"gpus": ["H200"]})
    loose = _key(root, needs_gpu=True, gpu={"gpus": ["H200"]}, hermetic=False)
    assert hermetic.digest != loose.digest
    assert {c.name for c in hermetic.components} >= {"gpu", "environment"}
    other_gpu = _key(root, needs_gpu=True, gpu={"gpus": ["A100"]})
    assert other_gpu.digest != hermetic.digest


def test_version_drift_lists_only_differences() -> None:
    locked = _lock().closure("app", ["test"])
    lines = cache_key.version_drift(locked, {"httpx": "0.28.1", "pytest": "9.0.0"})
    assert lines == ["pytest: locked 8.4.0, installed 9.0.0"]


def test_declared_artifacts_are_inputs(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    first = cache_key.artifact_component(artifacts, ["artifacts/bench-*.json"])
    (artifacts / "bench-nvidia-h200.json").write_text('{"ratio": 1.5}')
    (artifacts / "unrelated.xml").write_text("<x/>")
    second = cache_key.artifact_component(artifacts, ["artifacts/bench-*.json"])
    assert second.digest != first.digest
    assert list(second.files) == ["artifacts/bench-nvidia-h200.json"]
    (artifacts / "bench-nvidia-h200.json").write_text('{"ratio": 1.4}')
    assert cache_key.artifact_component(artifacts, ["artifacts/bench-*.json"]).digest != (
        second.digest)


def test_the_report_is_keyed_by_the_gpu_it_runs_on() -> None:
    import targets
    import units

    graph = targets.load(Path(__file__).resolve().parents[2])
    report = units.target_unit(graph, graph.targets["c128a-report"])
    assert report.gpu_in_key and not report.needs_gpu
    assert "artifacts/bench-*.json" in report.inputs
    policy = units.target_unit(graph, graph.targets["policy"])
    assert not policy.gpu_in_key


def test_an_ignored_declared_input_is_hashed_from_disk(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / ".gitignore").write_text("ignored.txt\n.upstream/\n")
    tree = cache_key.SourceTree(root)
    empty = cache_key.file_component("inputs", tree, [".upstream/swa"])
    assert empty.files == {}
    (root / ".upstream" / "swa").mkdir(parents=True)
    (root / ".upstream" / "swa" / "kernel.py").write_text("extracted = 1\n")
    found = cache_key.file_component("inputs", cache_key.SourceTree(root), [".upstream/swa"])
    assert list(found.files) == [".upstream/swa/kernel.py"] and found.digest != empty.digest


def test_tuning_is_never_replayed() -> None:
    import targets
    import units

    graph = targets.load(Path(__file__).resolve().parents[2])
    kinds = {t.kind: units.target_unit(graph, t).cacheable for t in graph.targets.values()}
    assert kinds["tune"] is False and kinds["test"] and kinds["bench"] and kinds["report"]


@pytest.mark.parametrize("inside_another_checkout", [False, True])
def test_outside_git_the_gitignore_still_decides(tmp_path: Path,
                                                 inside_another_checkout: bool) -> None:
    if inside_another_checkout:  # e.g. a copy left in an ignored folder of a checkout
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        (tmp_path / ".gitignore").write_text("copy/\n")
    root = tmp_path / "copy"  # a copy of the working tree, as a GPU runner receives it
    (root / "packages" / "app").mkdir(parents=True)
    (root / ".gitignore").write_text(".nox/\n/artifacts/\n*.pyc\n# comment\n")
    (root / "packages" / "app" / "m.py").write_text("X = 1\n")
    (root / "packages" / "app" / "m.pyc").write_bytes(b"\x00")
    (root / "packages" / "app" / ".nox" / "x").mkdir(parents=True)
    (root / "packages" / "app" / ".nox" / "x" / "f").write_text("env\n")
    (root / "artifacts").mkdir()
    (root / "artifacts" / "junit.xml").write_text("<x/>")
    (root / "packages" / "app" / "artifacts").mkdir()
    (root / "packages" / "app" / "artifacts" / "kept.txt").write_text("not anchored here\n")
    tree = cache_key.SourceTree(root)
    assert sorted(tree.files_under("")) == [
        ".gitignore", "packages/app/artifacts/kept.txt", "packages/app/m.py"]
