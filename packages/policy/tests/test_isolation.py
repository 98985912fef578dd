"""The policy package is pure standard library: it never imports torch, triton, numpy or vllm."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dsv4_policy

SOURCE = Path(dsv4_policy.__file__).parent
FORBIDDEN = ("torch", "triton", "numpy", "vllm", "dsv4_kernels", "dsv4_vllm", "dsv4_evals")


def test_every_import_is_stdlib_or_the_package_itself() -> None:
    allowed = set(sys.stdlib_module_names) | {"dsv4_policy", "__future__"}
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_importing_everything_loads_no_forbidden_module() -> None:
    code = (
        "import sys, dsv4_policy.registry, dsv4_policy.serve, dsv4_policy.cli, dsv4_policy.detect\n"
        "[k.shipped_table() for k in dsv4_policy.registry.KERNELS.values()]\n"
        "dsv4_policy.serve.shipped_table()\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_tables_ship_as_package_data() -> None:
    from dsv4_policy.registry import KERNELS

    for spec in KERNELS.values():
        assert (SOURCE / spec.table_file).is_file(), spec.name
    assert (SOURCE / "tables" / "serve.toml").is_file()
