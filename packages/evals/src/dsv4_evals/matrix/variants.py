"""The matrix's variants, read from a TOML data file (``data/comm_matrix.toml``).

Which environment variables to try is knowledge about one deployment (NCCL on TP8
without P2P, FlashInfer's allreduce), and it changes with the stack; it is data, not
code. The file names the envelope to measure at, an environment every variant gets,
and the variants, exactly one of them the control.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsv4_evals._patterns import PatternError, load_pattern_file, reject_unknown, table_list
from dsv4_evals._patterns import field as get_field

DEFAULT_FILE = "comm_matrix.toml"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Variant:
    name: str
    env: Mapping[str, str]  # base_env plus the variant's own
    control: bool = False
    note: str = ""
    own_env: Mapping[str, str] = field(default_factory=dict)  # what it adds to base_env


@dataclass(frozen=True)
class Matrix:
    source: str
    envelope: str
    base_env: Mapping[str, str]
    variants: tuple[Variant, ...]

    @property
    def control(self) -> Variant:
        return next(v for v in self.variants if v.control)

    def get(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise PatternError(
            f"variant {name!r} is not in {self.source}; its variants: "
            + ", ".join(v.name for v in self.variants)
        )


def load_matrix(path: str | Path | None = None) -> Matrix:
    """Read and validate a variant file; ``None`` reads the shipped one."""
    data, label = load_pattern_file(path, DEFAULT_FILE)
    reject_unknown(data, {"schema", "envelope", "base_env", "variant"}, label)
    schema = get_field(data, "schema", int, label, "schema = 1")
    if schema != 1:
        raise PatternError(f"{label}.schema: got {schema}, this reader understands schema = 1")
    envelope = get_field(data, "envelope", str, label, "a serve-table envelope id")
    base_env = _env(data.get("base_env", {}), f"{label}.base_env")
    variants = tuple(
        _variant(t, base_env, f"{label}.variant[{i}]")
        for i, t in enumerate(table_list(data, "variant", label))
    )
    names = [v.name for v in variants]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PatternError(f"{label}: variant names must be unique; repeated: {', '.join(dupes)}")
    controls = [v.name for v in variants if v.control]
    if len(controls) != 1:
        raise PatternError(
            f"{label}: exactly one variant needs control = true; found {len(controls)}"
            + (f" ({', '.join(controls)})" if controls else "")
        )
    return Matrix(label, envelope, base_env, variants)


def _variant(table: Mapping[str, Any], base_env: Mapping[str, str], where: str) -> Variant:
    reject_unknown(table, {"name", "control", "env", "note"}, where)
    name = get_field(table, "name", str, where, "a lowercase label such as 'tree-simple'")
    if not _NAME.match(name):
        raise PatternError(f"{where}.name: {name!r} is not a lowercase label (a-z, 0-9, ._-)")
    control = get_field(table, "control", bool, where, "true or false", default=False)
    own = _env(table.get("env", {}), f"{where}.env")
    note = get_field(table, "note", str, where, "a string", default="")
    return Variant(name, {**base_env, **own}, control, note, own)


def _env(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise PatternError(f"{where}: expected a table of NAME = \"value\", got {raw!r}")
    for key, value in raw.items():
        if not _ENV.match(key):
            raise PatternError(f"{where}.{key}: not an environment variable name")
        if not isinstance(value, str):
            raise PatternError(f"{where}.{key}: got {value!r}, expected a string (quote numbers)")
    return dict(raw)
