"""Writing and reading files below a trusted directory without following symlinks.

The result cache restores files named by records that may come from a shared remote
or a damaged local store. The directory they go under (the artifacts folder, the
repository, the cache itself) is trusted configuration; every name below it is not.
So paths here are checked by :func:`check_relative` before use, and then walked one
component at a time from an open directory descriptor, each step opened with
``O_NOFOLLOW``: a symlink planted anywhere below the base can never redirect a write
(or a read) to a file outside it.

Writes are atomic: the data goes to a temporary file created with ``O_EXCL`` in the
destination's own directory and is renamed over the destination. A reader in another
process sees the old file or the new one, never a torn mix; a symlink in the
destination's place is replaced itself, its target is never touched.

Linux semantics (``dir_fd``, ``O_NOFOLLOW``, ``O_DIRECTORY``); stdlib only.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath

MAX_COMPONENT_BYTES = 255  # NAME_MAX on Linux file systems
MAX_PATH_BYTES = 1024  # far above any output's name, far below PATH_MAX
TEMP_PREFIX = ".tmp-"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
)


class UnsafePath(ValueError):
    """A path that cannot be used safely: the message says which part and why.

    Raised instead of following a symlink, writing through a file where a directory
    should be, or reading something that is not a regular file.

    Example::

        >>> write_atomic_under(Path("artifacts"), "junit/x.xml", b"")  # junit -> /etc
        Traceback (most recent call last):
        UnsafePath: 'junit' in 'junit/x.xml' is a symbolic link, not a directory
    """


def check_relative(relative: object) -> str | None:
    """Why ``relative`` is not a safe path below a base, or None when it is.

    Safe means: a non-empty ``str`` in normal form (``PurePosixPath(p).as_posix() == p``),
    relative, of components that are neither empty, ``.`` nor ``..``, with no
    backslash, no control, format or unassigned character, no ``.git`` component in
    any letter case, and short enough for the file system. A path that passes can only
    name a file at or below the base, whatever the text came from.

    Example::

        >>> check_relative("junit/policy.xml") is None
        True
        >>> check_relative("../noxfile.py")
        "has a '..' component"
        >>> check_relative(".GIT/config")
        "has a '.git' component"
    """
    if not isinstance(relative, str):
        return f"is a {type(relative).__name__}, not a string"
    if not relative:
        return "is empty"
    if "\\" in relative:
        return "has a backslash"
    if any(unicodedata.category(ch).startswith("C") for ch in relative):
        return "has a control, format or unassigned character"
    if relative.startswith("/"):
        return "is absolute"
    parts = relative.split("/")
    if "" in parts:
        return "has an empty component"
    if "." in parts:
        return "has a '.' component"
    if ".." in parts:
        return "has a '..' component"
    if any(part.casefold() == ".git" for part in parts):
        return "has a '.git' component"
    if PurePosixPath(relative).as_posix() != relative:
        return "is not in normal form"
    if len(relative.encode()) > MAX_PATH_BYTES:
        return f"is longer than {MAX_PATH_BYTES} bytes"
    if any(len(part.encode()) > MAX_COMPONENT_BYTES for part in parts):
        return f"has a component longer than {MAX_COMPONENT_BYTES} bytes"
    return None


def _require_relative(relative: str) -> list[str]:
    reason = check_relative(relative)
    if reason is not None:
        raise UnsafePath(f"{relative!r:.120} {reason}")
    return relative.split("/")


def _kind(parent_fd: int, name: str) -> str:
    """What ``name`` is, for a message: 'a symbolic link', 'a regular file', …"""
    try:
        mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
    except OSError:
        return "gone"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a special file"


def _open_base(base: Path, *, create: bool) -> int:
    """A descriptor of the trusted base directory (symlinks in the base itself are
    configuration and followed); FileNotFoundError when absent and not ``create``."""
    if create:
        Path(base).mkdir(parents=True, exist_ok=True)
    return os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _descend(parent_fd: int, name: str, *, where: str, create: bool, replace: bool) -> int | None:
    """The directory ``name`` below ``parent_fd``, never through a symlink.

    None when it is absent and not ``create``. Something else in its place raises
    UnsafePath, unless ``replace`` (the caller owns everything below the base): then
    it is removed and a directory made.
    """
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            return None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if not replace:
            kind = _kind(parent_fd, name)
            raise UnsafePath(f"{name!r:.80} in {where!r:.120} is {kind}, not a directory") from None
        os.unlink(name, dir_fd=parent_fd)
    with suppress(FileExistsError):  # another process may make it first
        os.mkdir(name, 0o777, dir_fd=parent_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)


@contextmanager
def _parent(base: Path, parts: list[str], *, where: str, create: bool,
            replace: bool = False) -> Iterator[int | None]:
    """A descriptor of the directory holding ``parts[-1]``, walked from ``base``; None
    when some directory on the way is absent and not ``create``."""
    try:
        fd: int | None = _open_base(base, create=create)
    except FileNotFoundError:
        fd = None
    except NotADirectoryError:
        raise UnsafePath(f"the base {str(base)!r:.120} is not a directory") from None
    try:
        for name in parts[:-1]:
            if fd is None:
                break
            child = _descend(fd, name, where=where, create=create, replace=replace)
            os.close(fd)
            fd = child
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def check_under(base: Path, relative: str) -> str | None:
    """Why writing ``relative`` below ``base`` would be refused, or None; writes nothing.

    Lets a caller check every file of a set before writing any of them, so that a
    refused set leaves no file changed. Absent directories are fine (a write makes
    them); a symlink or a non-directory on the way is not, nor a directory in the
    file's place. A symlink in the file's own place is fine: a write replaces it.

    Example::

        >>> check_under(Path("artifacts"), "junit/policy.xml") is None
        True
        >>> check_under(Path("artifacts"), "linked/x.json")  # linked -> /tmp/elsewhere
        "'linked' in 'linked/x.json' is a symbolic link, not a directory"
    """
    try:
        parts = _require_relative(relative)
        with _parent(base, parts, where=relative, create=False) as fd:
            if fd is not None and _kind(fd, parts[-1]) == "a directory":
                return f"{relative!r:.120} is a directory"
    except UnsafePath as exc:
        return str(exc)
    return None


def write_atomic_under(base: Path, relative: str, data: bytes, *, replace: bool = False,
                       fsync: bool = False) -> Path:
    """Write ``data`` to ``base/relative`` atomically, never following a symlink.

    Missing directories are made. A symlink or a file where a directory should be
    raises UnsafePath, as does a directory in the file's place, unless ``replace``
    (for a store that owns everything below ``base``): then they are removed first.
    A symlink in the file's place is replaced by the file, its target untouched.
    With ``fsync`` the data and the directory entry reach the disk before return.

    Example::

        >>> write_atomic_under(Path("artifacts"), "junit/policy.xml", b"<testsuite/>")
        PosixPath('artifacts/junit/policy.xml')
    """
    parts = _require_relative(relative)
    with _parent(base, parts, where=relative, create=True, replace=replace) as fd:
        assert fd is not None  # create=True makes every directory
        _write_in(fd, parts[-1], data, where=relative, replace=replace, fsync=fsync)
    return Path(base) / relative


def _write_in(dir_fd: int, name: str, data: bytes, *, where: str, replace: bool,
              fsync: bool) -> None:
    temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}"
    fd = os.open(temp, _TEMP_FLAGS, 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        try:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not replace:
                raise UnsafePath(f"{where!r:.120} is a directory") from None
            shutil.rmtree(name, dir_fd=dir_fd)  # fd-based: never follows a link inside
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    if fsync:
        os.fsync(dir_fd)


def read_regular_under(base: Path, relative: str, *, limit: int) -> bytes | None:
    """The bytes of the regular file ``base/relative``, or None when it is absent.

    For reading entries of a store that others may have tampered with: a symlink
    anywhere on the way, a directory, a FIFO (which would block a plain ``open``) or a
    file over ``limit`` bytes raises UnsafePath instead of being followed or read.

    Example::

        >>> read_regular_under(cache_root, "ac/" + key, limit=1 << 20)
        b'{"key": ...}'
        >>> read_regular_under(cache_root, "ac/" + "0" * 64, limit=1 << 20) is None
        True
    """
    parts = _require_relative(relative)
    with _parent(base, parts, where=relative, create=False) as dir_fd:
        if dir_fd is None:
            return None
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise UnsafePath(f"{relative!r:.120} is a symbolic link") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UnsafePath(f"{relative!r:.120} is {_kind(dir_fd, parts[-1])}, "
                                 "not a regular file")
            if info.st_size > limit:
                raise UnsafePath(f"{relative!r:.120} is larger than {limit} bytes")
            data = _read_at_most(fd, limit + 1)
        finally:
            os.close(fd)
    if len(data) > limit:
        raise UnsafePath(f"{relative!r:.120} is larger than {limit} bytes")
    return data


def _read_at_most(fd: int, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def append_under(base: Path, relative: str, data: bytes) -> None:
    """Append ``data`` to the regular file ``base/relative``, making it if absent.

    For a log that several processes add lines to: ``O_APPEND`` keeps each write
    whole, and a symlink or a FIFO in the file's place raises UnsafePath instead of
    being followed or blocking.

    Example::

        >>> append_under(cache_root, "events.jsonl", b'{"kind": "hit"}\\n')
    """
    parts = _require_relative(relative)
    with _parent(base, parts, where=relative, create=True) as dir_fd:
        assert dir_fd is not None
        try:
            fd = os.open(parts[-1], _APPEND_FLAGS, 0o666, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise
            raise UnsafePath(f"{relative!r:.120} is {_kind(dir_fd, parts[-1])}, "
                             "not a regular file") from None
        with os.fdopen(fd, "ab") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise UnsafePath(f"{relative!r:.120} is not a regular file")
            handle.write(data)
