"""The target graph: valid declarations load, every malformed one names file and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import targets

ROOT = Path(__file__).resolve().parents[2]

POLICY = """
[project]
name = "dsv4-policy"
dependencies = []
[dependency-groups]
test = ["pytest"]
[[tool.dsv4.targets]]
name = "policy"
kind = "test"
tags = ["cpu"]
groups = ["test"]
pytest = ["tests"]
timeout = 60
"""

KERNELS = """
[project]
name = "dsv4-kernels"
dependencies = ["torch>=2"]
[dependency-groups]
test = ["pytest"]
bench = ["dsv4-policy", "pytest"]
[[tool.dsv4.targets]]
name = "kernels"
kind = "test"
tags = ["cpu", "interpreter"]
groups = ["test"]
set_env = { TRITON_INTERPRET = "1" }
pytest = ["tests"]
timeout = 60
[[tool.dsv4.targets]]
name = "kernels-bench"
kind = "bench"
tags = ["gpu", "bench"]
deps = ["dsv4-policy"]
groups = ["bench"]
pytest = ["benchmarks"]
timeout = 60
"""

VLLM = """
[project]
name = "dsv4-vllm"
dependencies = ["dsv4-policy", "dsv4-kernels", "vllm==0.33.0"]
[[tool.dsv4.targets]]
name = "vllm"
kind = "test"
tags = ["cpu", "vllm"]
pytest = ["tests"]
timeout = 60
"""


def test_the_repository_declarations_load() -> None:
    graph = targets.load(ROOT)
    assert {"dsv4-policy", "dsv4-kernels", "dsv4-vllm", "dsv4-evals"} <= set(graph.packages)
    assert {"policy", "kernels", "vllm", "evals"} <= set(graph.targets)
    assert graph.tagged("gpu"), "at least one gpu target must exist for `nox -s gpu`"


def test_graph_orders_deps_first(make_repo) -> None:
    graph = targets.load(make_repo({"policy": POLICY, "kernels": KERNELS, "vllm": VLLM}))
    assert graph.closure("dsv4-vllm") == ["dsv4-policy", "dsv4-kernels", "dsv4-vllm"]
    assert graph.target_packages(graph.targets["kernels-bench"]) == ["dsv4-policy", "dsv4-kernels"]
    assert graph.targets["kernels"].set_env == {"TRITON_INTERPRET": "1"}


def test_affected_follows_reverse_dependencies(make_repo) -> None:
    graph = targets.load(make_repo({"policy": POLICY, "kernels": KERNELS, "vllm": VLLM}))
    policy_change = {t.name for t in graph.affected(["packages/policy/src/x.py"])}
    assert policy_change == {"policy", "kernels-bench", "vllm"}
    kernel_change = {t.name for t in graph.affected(["packages/kernels/src/k.py"])}
    assert kernel_change == {"kernels", "kernels-bench", "vllm"}
    assert {t.name for t in graph.affected(["packages/vllm/src/p.py"])} == {"vllm"}
    assert graph.affected(["README.md"]) == []
    assert len(graph.affected(["noxfile.py"])) == len(graph.targets)


def test_affected_sessions_adds_aggregates_and_checks(make_repo) -> None:
    graph = targets.load(make_repo({"policy": POLICY, "kernels": KERNELS, "vllm": VLLM}))
    names = targets.affected_sessions(graph, ["packages/kernels/src/k.py"])
    assert names == ["kernels", "vllm", "bench", "lint", "build"]
    assert targets.affected_sessions(graph, []) == []


BROKEN = [
    ("unknown field", 'flavour = "x"', r"tool\.dsv4\.targets\[0\] \(policy\)\.flavour: unknown field"),
    ("bad kind", None, r"\.kind: expected one of test, bench, tune, report, got 'lint'"),
    ("bad tag", None, r"\.tags: expected a list drawn from .*got \['tpu'\]"),
    ("bad timeout", None, r"\.timeout: expected a positive number of seconds, got -1"),
    ("unknown group", None, r"\.groups: unknown dependency group 'docs'; this package defines: test"),
    ("unknown dep", None, r"\.deps: unknown dep 'dsv4-nothing'"),
    ("missing key", None, r"\.kind: missing"),
    ("bad env", None, r"\.env: 'lower' is not an environment variable name"),
    ("both runners", None, r"give exactly one of 'pytest' or 'command'"),
]


def _policy_with(line_edit: str) -> str:
    edits = {
        "bad kind": POLICY.replace('kind = "test"', 'kind = "lint"'),
        "bad tag": POLICY.replace('tags = ["cpu"]', 'tags = ["tpu"]'),
        "bad timeout": POLICY.replace("timeout = 60", "timeout = -1"),
        "unknown group": POLICY.replace('groups = ["test"]', 'groups = ["docs"]'),
        "unknown dep": POLICY.replace('groups = ["test"]', 'groups = ["test"]\ndeps = ["dsv4-nothing"]'),
        "missing key": POLICY.replace('kind = "test"\n', ""),
        "bad env": POLICY.replace('groups = ["test"]', 'groups = ["test"]\nenv = ["lower"]'),
        "both runners": POLICY.replace('pytest = ["tests"]', 'pytest = ["tests"]\ncommand = ["x"]'),
    }
    return edits[line_edit]


@pytest.mark.parametrize(("case", "extra", "pattern"), BROKEN, ids=[b[0] for b in BROKEN])
def test_malformed_declarations_name_file_and_key(make_repo, case, extra, pattern) -> None:
    text = POLICY.replace("timeout = 60", f"timeout = 60\n{extra}") if extra else _policy_with(case)
    root = make_repo({"policy": text})
    with pytest.raises(targets.TargetError) as err:
        targets.load(root)
    message = str(err.value)
    assert str(root / "packages" / "policy" / "pyproject.toml") in message
    assert re.search(pattern, message), message


def test_dependency_cycle_is_reported(make_repo) -> None:
    a = POLICY.replace("dependencies = []", 'dependencies = ["dsv4-kernels"]')
    root = make_repo({"policy": a, "kernels": KERNELS.replace('["torch>=2"]', '["dsv4-policy"]')})
    with pytest.raises(targets.TargetError, match=r"dependency cycle: dsv4-\w+ -> dsv4-\w+ -> dsv4-"):
        targets.load(root)


def test_dep_that_no_group_installs_is_rejected(make_repo) -> None:
    text = KERNELS.replace('groups = ["bench"]', 'groups = ["test"]')
    root = make_repo({"policy": POLICY, "kernels": text})
    with pytest.raises(targets.TargetError, match="no environment would install it"):
        targets.load(root)


def test_duplicate_target_names_are_rejected(make_repo) -> None:
    root = make_repo({"policy": POLICY, "kernels": KERNELS.replace('name = "kernels"\n', 'name = "policy"\n')})
    with pytest.raises(targets.TargetError, match="'policy' is also declared in"):
        targets.load(root)


def test_invalid_toml_is_reported_with_file(make_repo) -> None:
    root = make_repo({"policy": "[project\nname="})
    with pytest.raises(targets.TargetError, match=r"pyproject\.toml: \(file\): not valid TOML"):
        targets.load(root)
