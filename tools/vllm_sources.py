"""vLLM's Python sources, for GPU runners that cannot install the locked vLLM.

The locked vLLM wheel needs the lock's torch and is 336 MB, so an offline GPU runner
with another torch cannot install it. Its ``.py`` files import on that torch all the
same, and the DeepSeek-V4 metadata path the plugin patches needs none of vLLM's
compiled extensions. This module makes that a mode of the build, not a recipe:

- ``nox -s wheelhouse -- --vllm-sources --python 3.12 --platform manylinux_2_31_x86_64
  --out .vllm-sources`` (:func:`download`, on a machine with network access) fetches the
  locked vLLM wheel, checks its sha256 against ``uv.lock``, keeps every ``.py`` file
  outside ``vllm/third_party/`` (and the wheel's ``METADATA`` and ``entry_points.txt``,
  so that ``importlib.metadata.version("vllm")`` answers) in one zip, and downloads the
  locked, hash-checked wheels of the import-time packages a GPU runner lacks
  (:data:`IMPORT_TIME`); :func:`build` writes them and a manifest (:data:`MANIFEST`);
- ``DSV4_VLLM_SOURCES=.vllm-sources nox --no-venv -s gpu`` on the runner: every target
  whose environment holds vLLM gets the bundle, unpacked once into
  ``.nox/_vllm_sources/<digest>/`` (:meth:`Bundle.site`), first on its ``PYTHONPATH``;
  the run is keyed by the manifest (the ``vllm-sources`` key component) and its GPU
  fingerprint says ``"vllm": "0.33.0 (python sources, no compiled extensions)"``.

The bundle is checked against the repository's lock every time it is used: a bundle of
another vLLM, or a wheel whose sha256 the lock does not list, is refused with one line.
A run without vLLM and without a bundle fails before pytest with one message that says
how to get either (:func:`missing_message`).

Stdlib only: it runs in ``nox`` on runners that have no uv, before any environment exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lockfile import Lock, Locked, LockError, normalise

SCHEMA = "dsv4-vllm-sources/1"
VARIABLE = "DSV4_VLLM_SOURCES"
VLLM = "vllm"
MODE = "python sources, no compiled extensions"
MANIFEST = "manifest.json"
WHEELS = "wheels"
EXCLUDED = ("vllm/third_party/",)  # its NVML binding would select vLLM's compiled CUDA platform
DIST_INFO_FILES = ("METADATA", "entry_points.txt")
UNPACKED = Path(".nox") / "_vllm_sources"  # below the repository root, on the runner
# A zip member or wheel file we unpack must look like a plain relative path.
_SAFE_PART = re.compile(r"^[A-Za-z0-9_.+\-=@~ ]+$")
# A fixed timestamp, so that the same wheel always makes the same zip (and the same key).
_EPOCH = (1980, 1, 1, 0, 0, 0)

# The distributions vLLM 0.33.0 imports at start-up that a GPU runner with torch,
# triton, numpy, transformers and pytest lacks, by their names in uv.lock, each taken at
# the lock's version with the lock's hashes. (``openai_harmony`` is the module of the
# locked ``oss-harmony``; the locked openai and opentelemetry-api need neither
# ``distro`` nor ``importlib-metadata``.)
IMPORT_TIME = (
    "annotated-types", "apache-tvm-ffi", "cachetools", "cbor2", "fastapi", "httpcore2",
    "httpx2", "jiter", "llguidance", "msgspec", "openai", "opentelemetry-api",
    "oss-harmony", "partial-json-parser", "pybase64", "pydantic", "pydantic-core",
    "pyzmq", "sniffio", "starlette", "truststore", "typing-inspection", "xgrammar",
)


class SourcesError(ValueError):
    """A sources bundle is missing, damaged, or not the one the lock pins; the message
    says which file and what to do (usually: make the bundle again).

    >>> load(Path("/nowhere"), lock)
    SourcesError: DSV4_VLLM_SOURCES=/nowhere: no manifest.json; make the bundle with …
    """


REMAKE = ("nox -s wheelhouse -- --vllm-sources --python 3.12 "
          "--platform manylinux_2_31_x86_64 --out .vllm-sources")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest_json(value: object) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# --------------------------------------------------------------------------- the lock
def locked(lock: Lock) -> dict[str, Locked]:
    """vLLM and every distribution in its locked closure, by name: where the bundle's
    pins and hashes come from. A name locked at two versions is left out (none of
    :data:`IMPORT_TIME` is).

    >>> locked(lock)["vllm"].version, locked(lock)["pydantic"].version
    ('0.33.0', '2.14.4')
    """
    found: dict[str, list[Locked]] = {}
    for dist in lock.closure(VLLM):
        found.setdefault(dist.name, []).append(dist)
    return {name: dists[0] for name, dists in found.items() if len(dists) == 1}


def holds_vllm(lock: Lock, package: str, groups: Sequence[str]) -> bool:
    """Whether an environment of ``package`` plus ``groups`` holds vLLM: the targets the
    bundle is for, and the only ones whose key it changes.

    >>> holds_vllm(lock, "dsv4-vllm", ["test"]), holds_vllm(lock, "dsv4-kernels", ["test"])
    (True, False)
    """
    return any(d.name == VLLM for d in lock.closure(package, groups))


# --------------------------------------------------------------------------- making it
def _is_source(name: str, dist_info: str) -> bool:
    if name.startswith(f"{dist_info}/"):
        return name[len(dist_info) + 1:] in DIST_INFO_FILES
    return (name.startswith("vllm/") and name.endswith(".py")
            and not any(name.startswith(prefix) for prefix in EXCLUDED))


def extract_sources(wheel: Path, dest: Path, version: str) -> dict[str, object]:
    """Copy the wheel's ``.py`` files (less :data:`EXCLUDED`) and its ``METADATA`` and
    ``entry_points.txt`` into the zip ``dest``; no compiled extension, no data file.

    Members are written sorted, with a fixed timestamp, so the same wheel always gives
    the same zip, byte for byte, and so the same key on every runner.

    >>> extract_sources(Path("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"),
    ...                 Path(".vllm-sources/vllm-0.33.0-sources.zip"), "0.33.0")
    {'file': 'vllm-0.33.0-sources.zip', 'sha256': '…', 'python_files': 3024,
     'dist_info': ['vllm-0.33.0.dist-info/METADATA', 'vllm-0.33.0.dist-info/entry_points.txt'],
     'excluded': ['vllm/third_party/'], 'bytes': 12…}
    """
    dist_info = f"vllm-{version}.dist-info"
    with zipfile.ZipFile(wheel) as source:
        names = sorted(n for n in source.namelist() if _is_source(n, dist_info))
        for name in names:
            _check_member(name, wheel)
        meta = [n for n in names if n.startswith(dist_info + "/")]
        if f"{dist_info}/METADATA" not in meta:
            raise SourcesError(f"{wheel.name}: no {dist_info}/METADATA: not vLLM {version}'s wheel")
        tmp = dest.with_name(dest.name + ".partial")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as out:
            for name in names:
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                out.writestr(info, source.read(name), compresslevel=9)
    os.replace(tmp, dest)
    return {
        "file": dest.name,
        "sha256": _sha256_file(dest),
        "bytes": dest.stat().st_size,
        "python_files": len(names) - len(meta),
        "dist_info": meta,
        "excluded": list(EXCLUDED),
    }


def _wheel_version(path: Path) -> tuple[str, str]:
    """(normalised name, version) from a wheel's file name."""
    parts = path.name[: -len(".whl")].split("-")
    if len(parts) < 5 or not path.name.endswith(".whl"):
        raise SourcesError(f"{path.name}: not a wheel file name")
    return normalise(parts[0]), parts[1]


def _check_hash(path: Path, dist: Locked) -> str:
    sha = _sha256_file(path)
    if not dist.hashes:
        raise SourcesError(f"{path.name}: uv.lock lists no hash for {dist.name} "
                           f"{dist.version}, so it cannot be checked")
    if f"sha256:{sha}" not in dist.hashes:
        raise SourcesError(f"{path.name}: sha256 {sha} is not one uv.lock lists for "
                           f"{dist.name} {dist.version}")
    return sha


def build(out: Path, *, vllm_wheel: Path, wheels: Iterable[Path], lock: Lock,
          python: str, platforms: Sequence[str]) -> dict[str, object]:
    """Make the bundle in ``out`` from wheels already downloaded: the sources zip, the
    import-time wheels under ``wheels/`` and ``manifest.json``; return the manifest.

    Every wheel's sha256 must be one that ``uv.lock`` lists for the locked version of
    its distribution. ``out`` is made afresh; a folder that holds something other than
    a bundle is refused rather than emptied.

    >>> build(Path(".vllm-sources"), vllm_wheel=Path("dl/vllm-0.33.0-…whl"),
    ...       wheels=Path("dl").glob("*.whl"), lock=lock, python="3.12",
    ...       platforms=["manylinux_2_31_x86_64"])["vllm"]
    '0.33.0'
    """
    pins = locked(lock)
    vllm = pins.get(VLLM)
    if vllm is None:
        raise SourcesError(f"{lock.source}: vllm is not locked at one version")
    name, version = _wheel_version(vllm_wheel)
    if (name, version) != (VLLM, vllm.version):
        raise SourcesError(f"{vllm_wheel.name}: uv.lock pins vllm {vllm.version}")
    wheel_sha = _check_hash(vllm_wheel, vllm)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise SourcesError(f"{out}: not empty and not a sources bundle; choose another --out")
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / WHEELS).mkdir(parents=True)
    records = []
    for wheel in sorted(wheels, key=lambda p: p.name):
        dist_name, dist_version = _wheel_version(wheel)
        dist = pins.get(dist_name)
        if dist is None or dist.version != dist_version:
            raise SourcesError(f"{wheel.name}: uv.lock pins {dist_name} "
                               f"{dist.version if dist else '(not at all)'}")
        sha = _check_hash(wheel, dist)
        _check_wheel(wheel)
        shutil.copyfile(wheel, staging / WHEELS / wheel.name)
        records.append({"name": dist_name, "version": dist_version, "file": wheel.name,
                        "sha256": sha})
    sources = extract_sources(vllm_wheel, staging / f"vllm-{version}-sources.zip", version)
    manifest = {
        "schema": SCHEMA,
        "vllm": version,
        "mode": MODE,
        "wheel": vllm_wheel.name,
        "wheel_sha256": wheel_sha,
        "python": python,
        "platforms": list(platforms),
        "sources": sources,
        "wheels": records,
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)
    return manifest


def _check_wheel(wheel: Path) -> None:
    """A wheel we unpack by hand must need nothing but unpacking: no ``.pth`` start-up
    hook (only site folders run those), only plain relative paths."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            _check_member(name, wheel)
            if "/" not in name and name.endswith(".pth"):
                raise SourcesError(f"{wheel.name}: has a start-up hook {name}, which a "
                                   "folder on PYTHONPATH would not run")


_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platform_tags(platforms: Sequence[str]) -> list[str]:
    """Each ``manylinux_2_X`` platform with every older glibc tag it can run (pip takes
    ``--platform`` literally, and most wheels are tagged ``manylinux_2_17`` or older).

    >>> platform_tags(["manylinux_2_28_x86_64"])[:3], platform_tags(["manylinux_2_28_x86_64"])[-1]
    (['manylinux_2_28_x86_64', 'manylinux_2_27_x86_64', 'manylinux_2_26_x86_64'],
     'manylinux1_x86_64')
    """
    tags: list[str] = []
    for platform in platforms:
        match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
        if match is None:
            tags.append(platform)
            continue
        minor, arch = int(match.group(1)), match.group(2)
        for glibc in range(minor, 4, -1):
            tags.append(f"manylinux_2_{glibc}_{arch}")
            if glibc in _LEGACY:
                tags.append(f"{_LEGACY[glibc]}_{arch}")
    return list(dict.fromkeys(tags))


def download(session, lock: Lock, *, python: str, platforms: Sequence[str], out: Path) -> None:
    """``nox -s wheelhouse -- --vllm-sources …``: download the locked vLLM wheel and the
    import-time wheels, hash-checked by pip against the lock, then :func:`build`.

    >>> download(session, lock, python="3.12", platforms=["manylinux_2_31_x86_64"],
    ...          out=Path(".vllm-sources"))
    nox > vllm sources .vllm-sources: vllm 0.33.0 (python sources, no compiled extensions),
          3024 .py files in 12.1 MB, 23 import-time wheels in 17.9 MB; …
    """
    pins = locked(lock)
    wanted = [VLLM, *IMPORT_TIME]
    lines = []
    for name in wanted:
        dist = pins.get(name)
        if dist is None:
            raise SourcesError(f"{lock.source}: {name} is not locked at one version in "
                               "vllm's closure")
        hashes = " ".join(f"--hash={h}" for h in dist.hashes)
        lines.append(f"{dist.name}=={dist.version} {hashes}\n")
    tmp = Path(session.create_tmp()) / "vllm-sources-download"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    requirements = tmp / "requirements.txt"
    requirements.write_text("".join(lines))
    session.run(
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
        *(a for p in platform_tags(platforms) for a in ("--platform", p)),
        "-d", str(tmp), "-r", str(requirements), external=True,
    )
    found = sorted(tmp.glob("*.whl"))
    vllm_wheels = [w for w in found if _wheel_version(w)[0] == VLLM]
    if len(vllm_wheels) != 1:
        raise SourcesError(f"pip downloaded {len(vllm_wheels)} vllm wheels into {tmp}")
    manifest = build(out, vllm_wheel=vllm_wheels[0],
                     wheels=[w for w in found if w not in vllm_wheels], lock=lock,
                     python=python, platforms=platforms)
    shutil.rmtree(tmp, ignore_errors=True)  # the 336 MB wheel is not kept
    bundle = load(out, lock)
    session.log(f"vllm sources {out}: {bundle.summary()}; {bundle.size_mb():.1f} MB in all. "
                f"On the runner: {VARIABLE}={out} nox --no-venv -s gpu "
                f"(manifest sha256 {bundle.digest[:12]}, wheel sha256 "
                f"{manifest['wheel_sha256'][:12]})")


# --------------------------------------------------------------------------- using it
@dataclass(frozen=True)
class Bundle:
    """A checked sources bundle: its folder, its manifest and the manifest's digest.

    >>> bundle = load(Path(".vllm-sources"), lock)
    >>> bundle.describe(), bundle.digest[:12]
    ('0.33.0 (python sources, no compiled extensions)', '5be1…')
    """

    folder: Path
    manifest: Mapping[str, object]
    digest: str
    _files: tuple[Path, ...] = field(default=(), repr=False)

    def describe(self) -> str:
        """What the fingerprint and the logs say vLLM is in this mode.

        >>> bundle.describe()
        '0.33.0 (python sources, no compiled extensions)'
        """
        return f"{self.manifest['vllm']} ({MODE})"

    def summary(self) -> str:
        """One line for the logs and the key's detail: version, mode and sizes.

        >>> bundle.summary()
        'vllm 0.33.0 (python sources, no compiled extensions), 3024 .py files, 23 import-time …'
        """
        sources = self.manifest["sources"]
        return (f"vllm {self.describe()}, {sources['python_files']} .py files, "
                f"{len(self.manifest['wheels'])} import-time wheels")

    def size_mb(self) -> float:
        """What carrying the bundle costs, in MB.

        >>> round(bundle.size_mb())
        30
        """
        return sum(p.stat().st_size for p in self._files) / 1e6

    def versions(self) -> dict[str, str]:
        """``{name: version}`` of what the bundle puts first on the path: what a run in
        this mode really imports, for the key's installed versions and the drift list.

        >>> bundle.versions()["vllm"], bundle.versions()["pydantic"]
        ('0.33.0', '2.14.4')
        """
        found = {VLLM: str(self.manifest["vllm"])}
        found.update({w["name"]: w["version"] for w in self.manifest["wheels"]})
        return found

    def key_record(self) -> dict[str, object]:
        """What the ``vllm-sources`` key component digests: the manifest (every file's
        sha256 is in it and was checked), never the folder's path.

        >>> bundle.key_record()["wheel_sha256"][:12]
        '4b6bdec4ab26'
        """
        return dict(self.manifest)

    def fingerprint(self) -> dict[str, object]:
        """What the GPU fingerprint records beside ``"vllm"``.

        >>> bundle.fingerprint()
        {'wheel': 'vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl', 'wheel_sha256': '4b6b…',
         'python_files': 3024, 'excluded': ['vllm/third_party/'], 'wheels': 23,
         'manifest_sha256': '5be1…'}
        """
        sources = self.manifest["sources"]
        return {
            "wheel": self.manifest["wheel"],
            "wheel_sha256": self.manifest["wheel_sha256"],
            "python_files": sources["python_files"],
            "excluded": sources["excluded"],
            "wheels": len(self.manifest["wheels"]),
            "manifest_sha256": self.digest,
        }

    def check_python(self, version: str) -> None:
        """Refuse a bundle made for another Python than the run's: its compiled wheels
        (pydantic-core, pyzmq, …) would not import, and the run would fail far from here.

        >>> bundle.check_python("3.11")
        SourcesError: DSV4_VLLM_SOURCES=/repo/.vllm-sources was made for Python 3.12, …
        """
        made = str(self.manifest.get("python", ""))
        if made != version:
            remake = REMAKE.replace("--python 3.12", f"--python {version}")
            raise SourcesError(
                f"{VARIABLE}={self.folder} was made for Python {made}, and this run's "
                f"interpreter is Python {version}; make it with `{remake}`")

    def site(self, root: Path) -> Path:
        """The unpacked bundle, ``<root>/.nox/_vllm_sources/<digest>/``, made on first
        use: the sources zip and every wheel unpacked into one folder for
        ``PYTHONPATH``. A folder left half-made is made again.

        >>> bundle.site(ROOT)
        PosixPath('/repo/.nox/_vllm_sources/5be1c0de7a2b94f1')
        """
        dest = Path(root) / UNPACKED / self.digest[:16]
        marker = dest / ".complete"
        if marker.is_file() and marker.read_text().strip() == self.digest:
            return dest
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        _unpack(self.folder / self.manifest["sources"]["file"], staging)
        for wheel in self.manifest["wheels"]:
            _unpack(self.folder / WHEELS / wheel["file"], staging, wheel=True)
        (staging / ".complete").write_text(self.digest + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(staging, dest)
        return dest


def _check_member(name: str, archive: Path) -> None:
    parts = PurePosixPath(name).parts
    if (not parts or name.startswith("/") or "\\" in name
            or any(p in ("..", ".") or not _SAFE_PART.match(p) for p in parts)):
        raise SourcesError(f"{archive.name}: member {name!r} is not a plain relative path")


def _unpack(archive: Path, dest: Path, *, wheel: bool = False) -> None:
    """Unpack a zip (or a wheel, as an installer would for import: ``*.data/purelib``
    and ``platlib`` into the root, scripts, headers and data left out)."""
    with zipfile.ZipFile(archive) as source:
        for info in source.infolist():
            if info.is_dir():
                continue
            name = info.filename
            _check_member(name, archive)
            if stat.S_ISLNK(info.external_attr >> 16):
                raise SourcesError(f"{archive.name}: member {name!r} is a link")
            parts = name.split("/")
            if wheel and parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with source.open(info) as data, open(target, "xb") as handle:
                    shutil.copyfileobj(data, handle)
            except FileExistsError:
                raise SourcesError(f"{archive.name}: {'/'.join(parts)} is in two archives of "
                                   "the bundle") from None


_LOADED: dict[tuple, Bundle] = {}


def load(folder: Path, lock: Lock) -> Bundle:
    """Read and check the bundle in ``folder`` against ``lock``: the manifest's schema,
    the sha256 of every file it names, and that the lock pins that vLLM and lists each
    wheel's hash. Anything else is a :class:`SourcesError` naming the file.

    Checked once per process and state of the files (a cache hit stays cheap).

    >>> load(Path(".vllm-sources"), lock).summary()
    'vllm 0.33.0 (python sources, no compiled extensions), 3024 .py files, 23 import-time wheels'
    """
    folder = Path(folder).resolve()
    where = f"{VARIABLE}={folder}"
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise SourcesError(f"{where}: no {MANIFEST}; make the bundle with `{REMAKE}`") from None
    except (OSError, ValueError) as exc:
        raise SourcesError(f"{where}: {MANIFEST} is not readable JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise SourcesError(f"{where}: {MANIFEST} is not a {SCHEMA} manifest; make it again "
                           f"with `{REMAKE}`")
    try:
        sources = manifest["sources"]
        files = {folder / sources["file"]: sources["sha256"]}
        files.update({folder / WHEELS / w["file"]: w["sha256"] for w in manifest["wheels"]})
        for name in [sources["file"], *(w["file"] for w in manifest["wheels"])]:
            _check_member(name, path)
    except (KeyError, TypeError) as exc:
        raise SourcesError(f"{where}: {MANIFEST} lacks {exc}") from None
    try:
        state = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns)
                      for p in [path, *files])
    except FileNotFoundError as exc:
        raise SourcesError(f"{where}: {Path(exc.filename).name} is missing; make the bundle "
                           f"again with `{REMAKE}`") from None
    memo = (state, lock.source, id(lock))
    if memo in _LOADED:
        return _LOADED[memo]
    for file, sha in files.items():
        if _sha256_file(file) != sha:
            raise SourcesError(f"{where}: {file.name} does not match its sha256 in {MANIFEST}; "
                               f"make the bundle again with `{REMAKE}`")
    try:
        pins = locked(lock)
    except LockError as exc:
        raise SourcesError(f"{where}: {exc}") from None
    vllm = pins.get(VLLM)
    if vllm is None or manifest.get("vllm") != vllm.version:
        raise SourcesError(
            f"{where}: the bundle holds vllm {manifest.get('vllm')}, but {lock.source} pins "
            f"vllm {vllm.version if vllm else '(none)'}; make it again with `{REMAKE}`")
    if f"sha256:{manifest.get('wheel_sha256')}" not in vllm.hashes:
        raise SourcesError(f"{where}: its vllm wheel sha256 {manifest.get('wheel_sha256')} "
                           f"is not one {lock.source} lists for vllm {vllm.version}")
    for wheel in manifest["wheels"]:
        dist = pins.get(wheel.get("name"))
        if dist is None or dist.version != wheel.get("version") or (
                f"sha256:{wheel.get('sha256')}" not in dist.hashes):
            raise SourcesError(f"{where}: {wheel.get('file')} is not the wheel {lock.source} "
                               f"locks for {wheel.get('name')}; make the bundle again with "
                               f"`{REMAKE}`")
    bundle = Bundle(folder=folder, manifest=manifest, digest=_digest_json(manifest),
                    _files=(path, *files))
    _LOADED[memo] = bundle
    return bundle


def from_environment(environ: Mapping[str, str], root: Path, lock: Lock) -> Bundle | None:
    """The bundle ``DSV4_VLLM_SOURCES`` names (a relative path is taken from the
    repository root), checked; None when the variable is unset or empty.

    >>> from_environment({"DSV4_VLLM_SOURCES": ".vllm-sources"}, ROOT, lock).describe()
    '0.33.0 (python sources, no compiled extensions)'
    >>> from_environment({}, ROOT, lock) is None
    True
    """
    raw = environ.get(VARIABLE, "").strip()
    if not raw:
        return None
    return load(Path(root) / raw, lock)


# --------------------------------------------------------------------------- without it
def importable(python: str) -> bool:
    """Whether ``python``, started as a run starts it (no ``PYTHONPATH``, no user site),
    can import vLLM: what a ``--no-venv`` run checks before it runs a target that needs it.

    >>> importable(sys.executable)
    False
    """
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 4)"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONNOUSERSITE": "1", "LC_ALL": "C.UTF-8"}
    try:
        return subprocess.run([python, "-c", probe], env=env, capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def wheelhouse_has_vllm(house: Path, version: str) -> bool:
    """Whether an offline wheelhouse holds a wheel of the locked vLLM, which a venv
    synced from it needs.

    >>> wheelhouse_has_vllm(Path("/opt/dsv4-wheelhouse"), "0.33.0")
    False
    """
    return any(Path(house).glob(f"vllm-{version}-*.whl"))


def missing_message(names: Sequence[str], version: str, why: str, *, session: str,
                    others: Sequence[str] = ()) -> str:
    """The one message a run gives, before pytest, when a target needs vLLM and the
    run cannot have it: which targets, what is missing, and the two ways to provide it.

    >>> print(missing_message(["vllm-gpu"], "0.33.0", "--no-venv, and python3 has no vllm",
    ...                       session="gpu", others=["kernels-gpu"]))
    vllm-gpu needs vllm 0.33.0 (pinned in uv.lock), and this run has none: --no-venv, and …
    """
    narrow = (f"\n  Or leave it out: nox --no-venv -s {session} -- --targets {','.join(others)}"
              if others else "")
    return (
        f"{', '.join(names)} {'needs' if len(names) == 1 else 'need'} vllm {version} "
        f"(pinned in uv.lock), and this run has none: {why}. Provide it in one of two ways:\n"
        f"  1. a venv from the lock: `nox -s {session}` where the registry is reachable, or "
        "offline from a wheelhouse that holds it (`nox -s wheelhouse -- --python 3.12 "
        "--platform manylinux_2_28_x86_64 --out DIR` on a machine with network access, then "
        f"`DSV4_WHEELHOUSE=DIR UV_OFFLINE=1 nox -s {session}`);\n"
        f"  2. vLLM's Python sources (no compiled extensions): `{REMAKE}` on a machine with "
        "network access, carry .vllm-sources/ here, then "
        f"`{VARIABLE}=.vllm-sources nox --no-venv -s {session}`."
        + narrow
    )
