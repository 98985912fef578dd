"""vLLM's Python sources as a mode of the build (``vllm_sources.py``).

The wheels here are small ones these tests write with ``zipfile``; nothing is
downloaded. End to end, nox runs in a small workspace whose lock pins a "vllm 0.33.0"
of that kind: a target holding it runs from the bundle, is keyed by it and replayed,
and without any vLLM a run fails before pytest with one message.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import cache_key
import gpu_checks
import pytest
import targets
import units
import vllm_sources
from conftest import run_nox
from lockfile import Lock

VLLM_FILES = {
    "vllm/__init__.py": b"NAME = 'vllm from sources'\n",
    "vllm/platforms/__init__.py": b"current_platform = None\n",
    "vllm/third_party/pynvml.py": b"raise ImportError('never extracted')\n",
    "vllm/_C.abi3.so": b"\x7fELF compiled",
    "vllm/model_executor/configs/tile.json": b"{}",
    "vllm-0.33.0.dist-info/entry_points.txt": b"[vllm.general_plugins]\n",
    "vllm-0.33.0.dist-info/RECORD": b"",
}
DEP_FILES = {
    "tinydep/__init__.py": b"VALUE = 7\n",
    "tinydep-1.0.0.data/purelib/tinydep_extra.py": b"EXTRA = 1\n",
    "tinydep-1.0.0.data/scripts/tinydep-tool": b"#!/bin/sh\n",
}


def wheel(folder: Path, name: str, version: str, files: dict[str, bytes],
          tag: str = "py3-none-any") -> Path:
    """A wheel with ``files`` and its METADATA, written with zipfile."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{dist}-{version}.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    return path


def vllm_wheel(folder: Path, extra: dict[str, bytes] | None = None) -> Path:
    return wheel(folder, "vllm", "0.33.0", {**VLLM_FILES, **(extra or {})},
                 tag="cp38-abi3-manylinux_2_28_x86_64")


def sha(path: Path) -> str:
    return cache_key.sha256_bytes(path.read_bytes())


def lock_text(vllm_sha: str, dep_sha: str, *, vllm_version: str = "0.33.0",
              members: str = "") -> str:
    return (
        'version = 1\nrevision = 3\nrequires-python = ">=3.11"\n\n' + members
        + f'[[package]]\nname = "vllm"\nversion = "{vllm_version}"\n'
        'source = { registry = "https://pypi.org/simple" }\n'
        'dependencies = [{ name = "tinydep" }]\n'
        f'wheels = [{{ url = "https://example.invalid/vllm.whl", hash = "sha256:{vllm_sha}" }}]\n\n'
        '[[package]]\nname = "tinydep"\nversion = "1.0.0"\n'
        'source = { registry = "https://pypi.org/simple" }\n'
        f'wheels = [{{ url = "https://example.invalid/tinydep.whl", hash = "sha256:{dep_sha}" }}]\n'
    )


def make_bundle(tmp_path: Path, *, members: str = "", dep: dict[str, bytes] | None = None,
                out: Path | None = None) -> tuple[Path, Lock, Path]:
    """(bundle folder, its lock, the lock file) from freshly written wheels."""
    downloads = tmp_path / "downloads"
    vllm = vllm_wheel(downloads)
    tiny = wheel(downloads, "tinydep", "1.0.0", dep or DEP_FILES)
    lock_file = tmp_path / "uv.lock"
    lock_file.write_text(lock_text(sha(vllm), sha(tiny), members=members))
    lock = Lock.load(lock_file)
    out = out or tmp_path / "bundle"
    vllm_sources.build(out, vllm_wheel=vllm, wheels=[tiny], lock=lock, python="3.11",
                       platforms=["manylinux_2_31_x86_64"])
    return out, lock, lock_file


# --------------------------------------------------------------------------- making it
def test_the_sources_zip_holds_python_files_and_metadata_only(tmp_path: Path) -> None:
    source = vllm_wheel(tmp_path / "dl")
    first = vllm_sources.extract_sources(source, tmp_path / "a.zip", "0.33.0")
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        names = sorted(archive.namelist())
    assert names == ["vllm-0.33.0.dist-info/METADATA", "vllm-0.33.0.dist-info/entry_points.txt",
                     "vllm/__init__.py", "vllm/platforms/__init__.py"]
    assert first["python_files"] == 2 and first["excluded"] == ["vllm/third_party/"]
    again = vllm_sources.extract_sources(source, tmp_path / "b.zip", "0.33.0")
    assert again["sha256"] == first["sha256"]  # the same wheel, the same zip, byte for byte


def test_a_wheel_without_vllms_metadata_is_refused(tmp_path: Path) -> None:
    source = wheel(tmp_path, "vllm", "0.34.0", {"vllm/__init__.py": b""})
    with pytest.raises(vllm_sources.SourcesError, match=re.escape("no vllm-0.33.0.dist-info/METADATA")):
        vllm_sources.extract_sources(source, tmp_path / "a.zip", "0.33.0")


def test_the_manifest_names_the_wheel_its_hash_and_the_file_count(tmp_path: Path) -> None:
    bundle, _, _ = make_bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["vllm"] == "0.33.0" and manifest["mode"] == vllm_sources.MODE
    assert manifest["wheel"] == "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert manifest["wheel_sha256"] == sha(tmp_path / "downloads" / manifest["wheel"])
    assert manifest["sources"]["python_files"] == 2
    assert [w["name"] for w in manifest["wheels"]] == ["tinydep"]
    assert sorted(p.name for p in bundle.iterdir()) == ["manifest.json",
                                                        "vllm-0.33.0-sources.zip", "wheels"]


def test_every_wheel_must_carry_a_hash_the_lock_lists(tmp_path: Path) -> None:
    downloads = tmp_path / "downloads"
    vllm = vllm_wheel(downloads)
    tiny = wheel(downloads, "tinydep", "1.0.0", DEP_FILES)
    args = {"python": "3.11", "platforms": ["manylinux_2_31_x86_64"]}
    (tmp_path / "ok.lock").write_text(lock_text(sha(vllm), sha(tiny)))
    (tmp_path / "bad-vllm.lock").write_text(lock_text("00" * 32, sha(tiny)))
    (tmp_path / "bad-dep.lock").write_text(lock_text(sha(vllm), "00" * 32))
    (tmp_path / "newer.lock").write_text(lock_text(sha(vllm), sha(tiny), vllm_version="0.34.0"))
    with pytest.raises(vllm_sources.SourcesError, match=re.escape("is not one uv.lock lists for vllm")):
        vllm_sources.build(tmp_path / "o1", vllm_wheel=vllm, wheels=[tiny],
                           lock=Lock.load(tmp_path / "bad-vllm.lock"), **args)
    with pytest.raises(vllm_sources.SourcesError, match=re.escape("not one uv.lock lists for tinydep")):
        vllm_sources.build(tmp_path / "o2", vllm_wheel=vllm, wheels=[tiny],
                           lock=Lock.load(tmp_path / "bad-dep.lock"), **args)
    with pytest.raises(vllm_sources.SourcesError, match=re.escape("uv.lock pins vllm 0.34.0")):
        vllm_sources.build(tmp_path / "o3", vllm_wheel=vllm, wheels=[tiny],
                           lock=Lock.load(tmp_path / "newer.lock"), **args)
    (tmp_path / "o4").mkdir()
    (tmp_path / "o4" / "notes.txt").write_text("mine")
    with pytest.raises(vllm_sources.SourcesError, match=re.escape("not empty and not a sources bundle")):
        vllm_sources.build(tmp_path / "o4", vllm_wheel=vllm, wheels=[tiny],
                           lock=Lock.load(tmp_path / "ok.lock"), **args)
    assert (tmp_path / "o4" / "notes.txt").read_text() == "mine"


def test_a_wheel_that_needs_more_than_unpacking_is_refused(tmp_path: Path) -> None:
    for bad, why in ((dict(DEP_FILES, **{"tinydep.pth": b"import x\n"}), "start-up hook"),
                     (dict(DEP_FILES, **{"../escape.py": b""}), "not a plain relative path")):
        with pytest.raises(vllm_sources.SourcesError, match=why):
            make_bundle(tmp_path / why.replace(" ", "-"), dep=bad)


def test_older_glibc_tags_are_offered_to_pip() -> None:
    tags = vllm_sources.platform_tags(["manylinux_2_31_x86_64"])
    assert tags[0] == "manylinux_2_31_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_32_x86_64" not in tags
    assert vllm_sources.platform_tags(["macosx_11_0_arm64"]) == ["macosx_11_0_arm64"]


# --------------------------------------------------------------------------- using it
def test_a_damaged_or_stale_bundle_is_refused_with_what_to_do(tmp_path: Path) -> None:
    bundle, lock, lock_file = make_bundle(tmp_path)
    assert vllm_sources.load(bundle, lock).describe() == \
        "0.33.0 (python sources, no compiled extensions)"
    with pytest.raises(vllm_sources.SourcesError, match=re.escape("no manifest.json; make the bundle")):
        vllm_sources.load(tmp_path / "nowhere", lock)
    newer = lock_file.read_text().replace('version = "0.33.0"', 'version = "0.34.0"')
    (tmp_path / "newer.lock").write_text(newer)
    with pytest.raises(vllm_sources.SourcesError,
                       match=r"holds vllm 0\.33\.0, but .*newer\.lock pins vllm 0\.34\.0"):
        vllm_sources.load(bundle, Lock.load(tmp_path / "newer.lock"))
    zipped = bundle / "vllm-0.33.0-sources.zip"
    zipped.write_bytes(zipped.read_bytes() + b"junk")
    with pytest.raises(vllm_sources.SourcesError,
                       match=re.escape("sources.zip does not match its sha256")):
        vllm_sources.load(bundle, lock)
    (bundle / "wheels" / "tinydep-1.0.0-py3-none-any.whl").unlink()
    with pytest.raises(vllm_sources.SourcesError,
                       match=re.escape("tinydep-1.0.0-py3-none-any.whl is missing")):
        vllm_sources.load(bundle, lock)


def test_a_bundle_for_another_python_is_refused(tmp_path: Path) -> None:
    bundle_dir, lock, _ = make_bundle(tmp_path)
    bundle = vllm_sources.load(bundle_dir, lock)
    bundle.check_python("3.11")
    with pytest.raises(vllm_sources.SourcesError, match=re.escape(
            "was made for Python 3.11, and this run's interpreter is Python 3.12; make it "
            "with `nox -s wheelhouse -- --vllm-sources --python 3.12")):
        bundle.check_python("3.12")


def test_the_site_holds_the_sources_and_the_unpacked_wheels(tmp_path: Path) -> None:
    bundle_dir, lock, _ = make_bundle(tmp_path)
    bundle = vllm_sources.load(bundle_dir, lock)
    site = bundle.site(tmp_path / "repo")
    assert site == tmp_path / "repo" / ".nox" / "_vllm_sources" / bundle.digest[:16]
    files = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert files == [".complete", "tinydep-1.0.0.dist-info/METADATA", "tinydep/__init__.py",
                     "tinydep_extra.py", "vllm-0.33.0.dist-info/METADATA",
                     "vllm-0.33.0.dist-info/entry_points.txt", "vllm/__init__.py",
                     "vllm/platforms/__init__.py"]
    probe = ("import importlib.metadata as m, tinydep, tinydep_extra, vllm; "
             "print(m.version('vllm'), tinydep.VALUE, tinydep_extra.EXTRA, vllm.NAME)")
    out = subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(site)},
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0.33.0", "7", "1", "vllm", "from", "sources"]
    (site / "vllm" / "__init__.py").write_text("")  # a made folder is reused as it is
    assert bundle.site(tmp_path / "repo") == site and (site / "vllm/__init__.py").read_text() == ""
    (site / ".complete").unlink()  # a half-made one is made again
    assert bundle.site(tmp_path / "repo") == site and "NAME" in (site / "vllm/__init__.py").read_text()


MEMBERS = (
    '[[package]]\nname = "mini-gamma"\nversion = "0.1.0"\nsource = { editable = "packages/gamma" }\n'
    'dependencies = [{ name = "vllm" }]\n[package.dev-dependencies]\ntest = [{ name = "pytest" }]\n\n'
    '[[package]]\nname = "mini-alpha"\nversion = "0.1.0"\nsource = { editable = "packages/alpha" }\n'
    'dependencies = []\n[package.dev-dependencies]\ntest = [{ name = "pytest" }]\n\n'
    '[[package]]\nname = "pytest"\nversion = "9.0.0"\nsource = { registry = "https://pypi.org/simple" }\n'
    'wheels = [{ url = "https://example.invalid/pytest.whl", hash = "sha256:' + "ab" * 32 + '" }]\n\n'
)


def _graph(make_repo) -> targets.Graph:
    target = textwrap.dedent("""
        [[tool.dsv4.targets]]
        name = "{name}"
        kind = "test"
        tags = [{tags}]
        groups = ["test"]
        pytest = ["tests"]
        timeout = 60
        """)
    root = make_repo({
        "gamma": '[project]\nname = "mini-gamma"\nversion = "0.1.0"\ndependencies = ["vllm==0.33.0"]\n'
                 '[dependency-groups]\ntest = ["pytest"]\n'
                 + target.format(name="gamma-gpu", tags='"gpu"'),
        "alpha": '[project]\nname = "mini-alpha"\nversion = "0.1.0"\n'
                 '[dependency-groups]\ntest = ["pytest"]\n'
                 + target.format(name="alpha-gpu", tags='"gpu"'),
    })
    return targets.load(root)


def test_only_targets_that_hold_vllm_are_keyed_by_the_bundle(tmp_path: Path, make_repo) -> None:
    graph = _graph(make_repo)
    root = graph.root
    bundle, lock, _ = make_bundle(root / "work", members=MEMBERS)
    tree = cache_key.SourceTree(root)

    def key(name: str, *, hermetic: bool, env: dict[str, str]) -> cache_key.Key:
        inputs = cache_key.KeyInputs(
            root=root, tree=tree, lock=lock, outer_env=env, hermetic=hermetic,
            gpu={"gpus": ["NVIDIA H200"]}, installed=lambda pinned: {
                d.name: "(not installed)" for d in pinned if not d.editable})
        unit = units.target_unit(graph, graph.targets[name])
        return units.key_for(graph, unit, [], inputs)

    with_sources = {"DSV4_VLLM_SOURCES": str(bundle)}
    plain = key("gamma-gpu", hermetic=False, env={})
    sourced = key("gamma-gpu", hermetic=False, env=with_sources)
    assert sourced.digest != plain.digest
    component = {c.name: c for c in sourced.components}["vllm-sources"]
    assert "non-hermetic: vllm 0.33.0 (python sources, no compiled extensions)" in component.detail
    assert "vllm-sources" not in plain.component_digests()
    # What the run imports first is what the key records as installed.
    environment = {c.name: c for c in sourced.components}["environment"]
    assert environment.digest != {c.name: c for c in plain.components}["environment"].digest
    # A target without vLLM, and a hermetic run, are not keyed by it at all.
    assert key("alpha-gpu", hermetic=False, env=with_sources).digest == \
        key("alpha-gpu", hermetic=False, env={}).digest
    assert key("gamma-gpu", hermetic=True, env=with_sources).digest == \
        key("gamma-gpu", hermetic=True, env={}).digest
    # Another bundle is another key; the folder's path is not part of it.
    moved, _, _ = make_bundle(root / "work", members=MEMBERS, out=root / "elsewhere")
    assert key("gamma-gpu", hermetic=False, env={"DSV4_VLLM_SOURCES": str(moved)}).digest == \
        sourced.digest
    other, other_lock, _ = make_bundle(root / "work2", members=MEMBERS,
                                       dep=dict(DEP_FILES, **{"tinydep/new.py": b""}))
    inputs = cache_key.KeyInputs(root=root, tree=tree, lock=other_lock, hermetic=False,
                                 outer_env={"DSV4_VLLM_SOURCES": str(other)})
    changed = units.key_for(graph, units.target_unit(graph, graph.targets["gamma-gpu"]), [],
                            inputs)
    assert changed.component_digests()["vllm-sources"] != \
        sourced.component_digests()["vllm-sources"]


class FakeSession:
    """What ``full_fingerprint`` and ``drift`` use of a nox session."""

    def __init__(self, probe: dict) -> None:
        self.name, self.probe = "gpu", probe
        self.logs: list[str] = []
        self.warnings: list[str] = []

    def run(self, *args, **kwargs) -> str:
        return json.dumps(self.probe) + "\n"

    def log(self, text: str) -> None:
        self.logs.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def error(self, text: str) -> None:
        raise AssertionError(text)


def test_the_fingerprint_names_the_sources_mode(tmp_path: Path, make_repo) -> None:
    graph = _graph(make_repo)
    bundle_dir, lock, _ = make_bundle(graph.root / "work", members=MEMBERS)
    bundle = vllm_sources.load(bundle_dir, lock)
    session = FakeSession({"gpu": "NVIDIA H200", "compute_capability": "9.0",
                           "torch": "2.11.0+cu130"})
    data = gpu_checks.full_fingerprint(
        session, python=sys.executable, artifacts=tmp_path / "artifacts", hermetic=False,
        lock=lock, chosen=[graph.targets["gamma-gpu"]], sources=bundle)
    assert data["vllm"] == "0.33.0 (python sources, no compiled extensions)"
    assert data["vllm_sources"]["wheel_sha256"] == bundle.manifest["wheel_sha256"]
    assert data["vllm_sources"]["manifest_sha256"] == bundle.digest
    assert data["versions"]["vllm"] == {"locked": "0.33.0", "installed": "0.33.0"}
    assert not any(line.startswith("vllm:") for line in data["version_drift"])
    written = json.loads((tmp_path / "artifacts" / "gpu-fingerprint.json").read_text())
    assert written["vllm"] == data["vllm"]
    assert '"vllm": "0.33.0 (python sources, no compiled extensions)"' in session.logs[-1]
    without = gpu_checks.full_fingerprint(
        session, python=sys.executable, artifacts=tmp_path / "artifacts", hermetic=False,
        lock=lock, chosen=[graph.targets["gamma-gpu"]])
    assert "vllm" not in without
    assert without["versions"]["vllm"]["installed"] == "(not installed)"


# --------------------------------------------------------------------------- end to end
FAKE_SMI = "#!/bin/sh\necho 'NVIDIA H200, 9.0, 580.00.00'\n"
GAMMA_TEST = textwrap.dedent("""\
    import importlib.metadata
    import os

    import tinydep
    import tinydep_extra
    import vllm


    def test_vllm_comes_from_the_bundle():
        site = os.environ["DSV4_VLLM_SOURCES"]
        assert importlib.metadata.version("vllm") == "0.33.0"
        assert vllm.__file__.startswith(site + os.sep)
        assert not os.path.exists(os.path.join(site, "vllm", "third_party"))
        assert tinydep.VALUE == 7 and tinydep_extra.EXTRA == 1
    """)


def _workspace(repo: Path) -> Path:
    """The mini workspace plus a package whose CPU and GPU targets hold vLLM, and a GPU
    target of alpha's that does not; returns a folder with a fake nvidia-smi."""
    pkg = repo / "packages" / "gamma"
    (pkg / "src" / "mini_gamma").mkdir(parents=True)
    (pkg / "tests").mkdir()
    (pkg / "src" / "mini_gamma" / "__init__.py").write_text("")
    (pkg / "tests" / "test_gamma.py").write_text(GAMMA_TEST)
    target = ('[[tool.dsv4.targets]]\nname = "{name}"\nkind = "test"\ntags = [{tags}]\n'
              'groups = ["test"]\npytest = ["tests", "-q"]\ntimeout = 120\n')
    (pkg / "pyproject.toml").write_text(
        '[project]\nname = "mini-gamma"\nversion = "0.1.0"\ndependencies = ["vllm==0.33.0"]\n'
        '[dependency-groups]\ntest = ["pytest"]\n' + target.format(name="gamma", tags='"cpu"')
        + target.format(name="gamma-gpu", tags='"gpu"'))
    alpha = repo / "packages" / "alpha" / "pyproject.toml"
    alpha.write_text(alpha.read_text() + target.format(name="alpha-gpu", tags='"gpu"'))
    downloads = repo.parent / "downloads"
    vllm = vllm_wheel(downloads)
    tiny = wheel(downloads, "tinydep", "1.0.0", DEP_FILES)
    lock = (repo / "uv.lock").read_text()
    head, _, rest = lock.partition("[[package]]")
    gamma = ('[[package]]\nname = "mini-gamma"\nversion = "0.1.0"\n'
             'source = { editable = "packages/gamma" }\ndependencies = [{ name = "vllm" }]\n'
             '[package.dev-dependencies]\ntest = [{ name = "pytest" }]\n\n')
    tail = lock_text(sha(vllm), sha(tiny)).partition("\n\n")[2]
    (repo / "uv.lock").write_text(head + gamma + "[[package]]" + rest + "\n" + tail)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "gamma"], cwd=repo, check=True)
    lock_obj = Lock.load(repo / "uv.lock")
    vllm_sources.build(repo.parent / "bundle", vllm_wheel=vllm, wheels=[tiny], lock=lock_obj,
                       python=f"{sys.version_info.major}.{sys.version_info.minor}",
                       platforms=["manylinux_2_31_x86_64"])
    bin_dir = repo.parent / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    return bin_dir


def _env(repo: Path, bin_dir: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CI": "true",
            "DSV4_CACHE_DIR": str(repo.parent / "cache"), **extra}


def test_without_vllm_a_gpu_run_fails_before_pytest_with_one_message(mini_repo: Path) -> None:
    bin_dir = _workspace(mini_repo)
    run = run_nox(mini_repo, "-s", "gpu", env=_env(mini_repo, bin_dir))
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert out.count("gamma-gpu needs vllm 0.33.0 (pinned in uv.lock), and this run has "
                     "none: --no-venv, and") == 1, out
    assert "1. a venv from the lock" in out and "DSV4_WHEELHOUSE=DIR" in out
    assert ("2. vLLM's Python sources (no compiled extensions): `nox -s wheelhouse -- "
            "--vllm-sources") in out
    assert "DSV4_VLLM_SOURCES=.vllm-sources nox --no-venv -s gpu" in out
    assert "Or leave it out: nox --no-venv -s gpu -- --targets alpha-gpu" in out
    assert "Traceback" not in out and "ModuleNotFoundError" not in out
    assert "passed" not in out and "target gamma-gpu" not in out  # nothing ran, not even alpha
    assert not (mini_repo / "artifacts" / "junit").exists()


def test_with_a_venv_a_wheelhouse_without_vllm_fails_the_same_way(mini_repo: Path) -> None:
    bin_dir = _workspace(mini_repo)
    house = mini_repo.parent / "house"
    house.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "PYTEST"))}
    run = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(mini_repo / "noxfile.py"), "-s", "gpu"],
        cwd=mini_repo, env={**base, **_env(mini_repo, bin_dir, DSV4_WHEELHOUSE=str(house))},
        capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert out.count(f"gamma-gpu needs vllm 0.33.0 (pinned in uv.lock), and this run has "
                     f"none: the wheelhouse DSV4_WHEELHOUSE={house} holds no vllm-0.33.0 "
                     "wheel") == 1, out
    assert "Traceback" not in out and "passed" not in out
    # The sources mode is for --no-venv runs only: a venv installs vLLM from the lock.
    run = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(mini_repo / "noxfile.py"), "-s", "gamma"],
        cwd=mini_repo, env={**base, **_env(mini_repo, bin_dir, DSV4_VLLM_SOURCES=str(
            mini_repo.parent / "bundle"))}, capture_output=True, text=True, timeout=600)
    assert run.returncode != 0
    assert "DSV4_VLLM_SOURCES is for --no-venv runs" in run.stdout + run.stderr


def test_a_run_from_the_bundle_is_keyed_by_it_and_replayed(mini_repo: Path) -> None:
    bin_dir = _workspace(mini_repo)
    bundle = mini_repo.parent / "bundle"
    env = _env(mini_repo, bin_dir, DSV4_VLLM_SOURCES=str(bundle))
    first = run_nox(mini_repo, "-s", "gamma", env=env)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    assert "gamma: vllm 0.33.0 (python sources, no compiled extensions) from " in out
    assert "1 passed" in out and "vllm: locked 0.33.0" not in out  # no drift for the bundle's
    again = run_nox(mini_repo, "-s", "gamma", env=env)
    assert again.returncode == 0 and "gamma: cached PASSED" in again.stdout + again.stderr
    explain = run_nox(mini_repo, "-s", "cache", "--", "explain", "gamma", "--no-venv", env=env)
    # explain keys as the run does: the component is there, as the stored pass has it.
    assert re.search(r"^\s*vllm-sources\s+[0-9a-f]{12}\s+same\s+non-hermetic: vllm 0.33.0",
                     explain.stdout, re.M), explain.stdout
    # Without the bundle (and no vLLM in the interpreter), the same target is refused.
    bare = run_nox(mini_repo, "-s", "gamma", env=_env(mini_repo, bin_dir))
    assert bare.returncode != 0
    assert "gamma needs vllm 0.33.0" in bare.stdout + bare.stderr
    # A damaged bundle fails the run with one line naming the file.
    zipped = bundle / "vllm-0.33.0-sources.zip"
    zipped.write_bytes(zipped.read_bytes() + b"junk")
    broken = run_nox(mini_repo, "-s", "gamma", env=env)
    assert broken.returncode != 0
    assert "vllm-0.33.0-sources.zip does not match its sha256" in broken.stdout + broken.stderr
    assert "Traceback" not in broken.stdout + broken.stderr
