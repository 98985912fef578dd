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


# --------------------------------------------------------------------------- target families
EVALS = """
[project]
name = "dsv4-evals"
dependencies = ["dsv4-policy"]
[dependency-groups]
bench = ["dsv4-kernels", "pytest"]
[[tool.dsv4.targets]]
each = "src/e/bench/{kernel}/gates.py"
name = "{kernel}-bench"
kind = "bench"
tags = ["gpu", "bench"]
deps = ["dsv4-kernels"]
groups = ["bench"]
pytest = ["src/e/bench/{kernel}", "-q"]
inputs = ["//baselines", "//.upstream/{kernel}"]
outputs = ["artifacts/bench-{kernel}.json"]
timeout = 60
"""


def _evals_repo(make_repo, text: str = EVALS, kernels: tuple[str, ...] = ("c128a", "swa")) -> Path:
    root = make_repo({"policy": POLICY, "kernels": KERNELS, "evals": text})
    for name in kernels:
        folder = root / "packages" / "evals" / "src" / "e" / "bench" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "gates.py").write_text("")
    (root / "packages" / "evals" / "src" / "e" / "bench" / "step").mkdir(exist_ok=True)
    return root


def test_a_family_gives_one_target_per_matching_folder(make_repo) -> None:
    graph = targets.load(_evals_repo(make_repo))
    bench = {t.name: t for t in graph.of_kind("bench") if t.package.dist == "dsv4-evals"}
    assert sorted(bench) == ["c128a-bench", "swa-bench"]  # step/ has no gates.py
    swa = bench["swa-bench"]
    assert swa.pytest == ("src/e/bench/swa", "-q")
    assert swa.inputs == ("baselines", ".upstream/swa")
    assert swa.outputs == ("artifacts/bench-swa.json",)
    assert graph.target_packages(swa) == ["dsv4-kernels", "dsv4-policy", "dsv4-evals"]


def test_a_new_folder_is_a_new_target_with_no_declaration_edit(make_repo) -> None:
    root = _evals_repo(make_repo)
    before = set(targets.load(root).targets)
    (root / "packages/evals/src/e/bench/compressed_slot_mapping").mkdir()
    (root / "packages/evals/src/e/bench/compressed_slot_mapping/gates.py").write_text("")
    after = set(targets.load(root).targets)
    assert after - before == {"compressed_slot_mapping-bench"}


FAMILY_BROKEN = [
    ("no placeholder", ('each = "src/e/bench/{kernel}/gates.py"', 'each = "src/e/bench/c128a/gates.py"'),
     r"\(\{kernel\}-bench\)\.each: 'src/e/bench/c128a/gates.py' must hold exactly one placeholder"),
    ("two placeholders", ('each = "src/e/bench/{kernel}/gates.py"', 'each = "src/{a}/{kernel}/gates.py"'),
     r"\.each: .* must hold exactly one placeholder"),
    ("partial component", ('each = "src/e/bench/{kernel}/gates.py"', 'each = "src/e/bench/x{kernel}/gates.py"'),
     r"\.each: .* as a whole path component"),
    ("glob", ('each = "src/e/bench/{kernel}/gates.py"', 'each = "src/*/bench/{kernel}/gates.py"'),
     r"\.each: .* without '\.\.' or glob characters"),
    ("root path", ('each = "src/e/bench/{kernel}/gates.py"', 'each = "//src/e/bench/{kernel}/gates.py"'),
     r"\.each: .* must be a package-relative path"),
    ("no match", ('each = "src/e/bench/{kernel}/gates.py"', 'each = "src/e/bench/{kernel}/tune.py"'),
     r"\.each: 'src/e/bench/\{kernel\}/tune.py' matches nothing under .*evals"),
    ("name without it", ('name = "{kernel}-bench"', 'name = "bench-all"'),
     r"\(bench-all\)\.name: a family's name must hold '\{kernel\}'"),
    ("other placeholder", ('"-q"]', '"-k", "{name}"]'),
     r"\.pytest: '\{name\}' uses \{name\}; this family's placeholder is \{kernel\}"),
    ("placeholder elsewhere", ('timeout = 60', 'timeout = 60\nenv = ["{kernel}"]'),
     r"\.env: placeholders are replaced only in name, pytest, command, inputs, outputs"),
    ("bad each type", ('each = "src/e/bench/{kernel}/gates.py"', "each = 3"),
     r"\.each: expected a package-relative path with one placeholder folder"),
]


@pytest.mark.parametrize(("case", "edit", "pattern"), FAMILY_BROKEN, ids=[b[0] for b in FAMILY_BROKEN])
def test_malformed_families_name_file_and_key(make_repo, case, edit, pattern) -> None:
    root = _evals_repo(make_repo, EVALS.replace(*edit))
    with pytest.raises(targets.TargetError) as err:
        targets.load(root)
    message = str(err.value)
    assert str(root / "packages" / "evals" / "pyproject.toml") in message
    assert re.search(pattern, message), message


def test_a_member_that_is_no_module_name_is_refused(make_repo) -> None:
    root = _evals_repo(make_repo, kernels=("c128a", "Bad-Name"))
    with pytest.raises(targets.TargetError, match=r"'Bad-Name' is not a valid \{kernel\}"):
        targets.load(root)


def test_family_members_are_labelled_in_later_errors(make_repo) -> None:
    root = _evals_repo(make_repo, EVALS.replace('groups = ["bench"]', 'groups = ["nope"]'))
    with pytest.raises(targets.TargetError, match=r"\(c128a-bench, kernel=c128a\)\.groups: unknown dependency group"):
        targets.load(root)


def test_a_family_member_clashing_with_a_target_is_a_duplicate(make_repo) -> None:
    single = EVALS.split("[[tool.dsv4.targets]]")[1].replace(
        'each = "src/e/bench/{kernel}/gates.py"\nname = "{kernel}-bench"', 'name = "swa-bench"'
    ).replace("{kernel}", "swa")
    root = _evals_repo(make_repo, EVALS + "[[tool.dsv4.targets]]" + single)
    with pytest.raises(targets.TargetError, match="'swa-bench' is also declared in"):
        targets.load(root)


def test_a_placeholder_outside_a_family_is_refused(make_repo) -> None:
    root = make_repo({"policy": POLICY.replace('pytest = ["tests"]', 'pytest = ["tests/{kernel}"]')})
    with pytest.raises(targets.TargetError, match=r"\(policy\)\.pytest: 'tests/\{kernel\}' has a placeholder, but the declaration has no 'each'"):
        targets.load(root)


# --------------------------------------------------------------------------- path spaces
def test_paths_are_package_relative_unless_spelled_from_the_root(make_repo) -> None:
    text = POLICY.replace("timeout = 60", 'timeout = 60\ninputs = ["data", "//benchmarks/baselines", "artifacts/bench-*.json"]\noutputs = ["report.json", "//report/*", "artifacts/x.json"]')
    target = targets.load(make_repo({"policy": text})).targets["policy"]
    assert target.inputs == ("packages/policy/data", "benchmarks/baselines", "artifacts/bench-*.json")
    assert target.outputs == ("packages/policy/report.json", "report/*", "artifacts/x.json")


PATH_BROKEN = [
    ("absolute", "/etc/passwd", r"'/etc/passwd' is not a path inside the repository"),
    ("root absolute", "///etc", r"'///etc' is not a path inside the repository"),
    ("parent", "../x", r"'\.\./x' is not a path inside the repository"),
    ("root parent", "//a/../../x", r"'//a/\.\./\.\./x' is not a path inside the repository"),
    ("empty", "", r"'' is not a path inside the repository"),
    ("empty root", "//", r"'//' is not a path inside the repository"),
    ("backslash", "a\\\\b", r"is not a path inside the repository"),
    ("whole artifacts", "artifacts/", r"name the files under artifacts/"),
]


@pytest.mark.parametrize(("case", "path", "pattern"), PATH_BROKEN, ids=[b[0] for b in PATH_BROKEN])
def test_paths_outside_the_repository_are_refused(make_repo, case, path, pattern) -> None:
    for key in ("inputs", "outputs"):
        root = make_repo({"policy": POLICY.replace("timeout = 60", f'timeout = 60\n{key} = ["{path}"]')})
        with pytest.raises(targets.TargetError) as err:
            targets.load(root)
        assert f"(policy).{key}:" in str(err.value)
        assert re.search(pattern, str(err.value)), str(err.value)


def test_a_root_file_spelled_package_relative_is_caught(make_repo) -> None:
    root = make_repo({"policy": POLICY.replace("timeout = 60", 'timeout = 60\ninputs = ["benchmarks/baselines"]')})
    (root / "benchmarks" / "baselines").mkdir(parents=True)
    with pytest.raises(targets.TargetError, match=r"packages/policy/benchmarks/baselines does not exist\); did you mean '//benchmarks/baselines'"):
        targets.load(root)
    (root / "packages" / "policy" / "benchmarks" / "baselines").mkdir(parents=True)
    assert targets.load(root).targets["policy"].inputs == ("packages/policy/benchmarks/baselines",)
