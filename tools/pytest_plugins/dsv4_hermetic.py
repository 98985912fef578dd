"""pytest plugin loaded by every session (``-p dsv4_hermetic``).

- Blocks network access: any connection to a non-loopback address raises, so a test
  that reaches out fails instead of depending on the outside world.
- Pins one GPU per pytest-xdist worker: worker ``gwN`` sees only the N-th device
  of the session's CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


class NetworkBlocked(RuntimeError):
    """Raised when a test tries to reach a non-loopback address.

    Its own type, so that a test that reached out fails with a message saying why,
    instead of hanging or passing on whatever the network answered.

    Example::

        >>> socket.create_connection(("10.0.0.1", 80))
        NetworkBlocked: network access to ('10.0.0.1', 80) is blocked in tests; only
        loopback (127.0.0.0/8, ::1, localhost) and unix sockets are allowed
    """


def _is_local(address: object) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    if not isinstance(address, tuple) or not address:
        return False
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guard(address: object) -> None:
    if not _is_local(address):
        raise NetworkBlocked(
            f"network access to {address!r} is blocked in tests; only loopback "
            "(127.0.0.0/8, ::1, localhost) and unix sockets are allowed"
        )


def _connect(self: socket.socket, address: object) -> None:
    _guard(address)
    return _real_connect(self, address)


def _connect_ex(self: socket.socket, address: object) -> int:
    _guard(address)
    return _real_connect_ex(self, address)


def _pin_worker_gpu() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not worker.startswith("gw"):
        return
    index = int(worker[2:])
    listed = [d for d in devices.split(",") if d] if devices else [str(index)]
    if index < len(listed):
        os.environ["CUDA_VISIBLE_DEVICES"] = listed[index]


def pytest_configure(config: pytest.Config) -> None:
    """pytest hook: block non-loopback connections and pin this worker's GPU.

    Done at configure time, before any test module is imported, so that nothing a
    test imports can open a connection first. Under xdist, worker ``gwN`` keeps only
    the N-th entry of ``CUDA_VISIBLE_DEVICES``.

    Example::

        $ PYTEST_XDIST_WORKER=gw1 CUDA_VISIBLE_DEVICES=2,3 pytest -p dsv4_hermetic …
        # in that worker: os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    """
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    _pin_worker_gpu()


def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest hook: put the real ``connect`` and ``connect_ex`` back.

    So that a process that runs pytest in-process (``pytester``, an IDE) gets its
    network back afterwards.

    Example::

        >>> pytest_configure(config); pytest_unconfigure(config)
        >>> socket.socket.connect is _real_connect
        True
    """
    socket.socket.connect = _real_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]
