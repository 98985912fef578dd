"""One ``--arch`` in every subcommand, and what an arch no table knows prints.

Such a key is an ordinary miss, so the result is the baseline (or, for ``serve``, the
user's own arguments); the command adds one line on stderr naming the arches the table
does know, and ``--json`` carries the same in ``arch_note`` and ``known_arches``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsv4_policy import serve
from dsv4_policy.cli import arch_note, known_arches, main
from dsv4_policy.launch_table import KernelSpec
from dsv4_policy.registry import KERNELS, names
from dsv4_policy.table import Entry
from policy_strategies import key_args

SPECS = list(KERNELS.values())
UNKNOWN = "sm9000"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def kernel_argv(spec: KernelSpec, arch: str) -> list[str]:
    values = key_args(spec, arch=arch)
    return [spec.name] + [x for k, v in values.items() for x in ("--" + k.replace("_", "-"),
                                                                   str(v))]


def keys_argv(spec: KernelSpec, arch: str) -> list[str]:
    argv = ["keys", "--kernel", spec.name, "--arch", arch]
    for d in spec.deployment:
        argv += ["--" + d.name.replace("_", "-"), str(128 if d.default is None else d.default)]
    return argv


def shipped_arches(spec: KernelSpec) -> str:
    """What the note says the shipped table knows (a kernel not tuned yet knows none)."""
    named, _ = known_arches(spec.shipped_table())
    return ", ".join(named) if named else "none: it has no entries"


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_an_unknown_arch_resolves_to_the_baseline_and_names_the_known_ones(
        spec: KernelSpec, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *kernel_argv(spec, UNKNOWN))
    assert code == 0
    assert "baseline" in out
    assert err.splitlines() == [
        f"note: the {spec.name} table has no entry for {UNKNOWN} (it knows "
        f"{shipped_arches(spec)}); the launch is the baseline"]
    code, out, err = run(capsys, *kernel_argv(spec, UNKNOWN), "--json")
    data = json.loads(out)
    key = spec.key_type(**data["key"])
    assert code == 0 and err == ""
    assert data["launch"]["source"] == "baseline"
    assert data["launch"] == json.loads(json.dumps(spec.baseline(key).__dict__))
    assert data["arch_note"] == f"note: the {spec.name} table has no entry for {UNKNOWN} " \
                                f"(it knows {shipped_arches(spec)}); the launch is the baseline"
    assert data["known_arches"] == list(known_arches(spec.shipped_table())[0])


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_an_arch_the_table_names_prints_no_note(spec: KernelSpec,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    named, _ = known_arches(spec.shipped_table())
    for arch in named:
        assert run(capsys, *kernel_argv(spec, arch))[::2] == (0, "")
        code, out, err = run(capsys, *kernel_argv(spec, arch), "--json")
        assert (code, json.loads(out)["arch_note"], err) == (0, None, "")


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_keys_for_an_unknown_arch_lists_the_baseline_and_says_why(
        spec: KernelSpec, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, note = run(capsys, *keys_argv(spec, UNKNOWN))
    assert code == 0
    assert note == (f"note: the {spec.name} table has no entry for {UNKNOWN} (it knows "
                    f"{shipped_arches(spec)}); only the baseline's compile keys apply\n")
    code, out, err = run(capsys, *keys_argv(spec, UNKNOWN), "--json")
    data = json.loads(out)
    assert (code, err) == (0, "")
    assert all(k["sources"] == ["baseline"] for k in data["compile_keys"])
    assert data["arch_note"] == note.rstrip()
    assert data["known_arches"] == list(known_arches(spec.shipped_table())[0])


def test_serve_for_an_unknown_arch_passes_through_and_names_the_known_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--arch", UNKNOWN, "--tp", "8", "--context", "262144", "--seqs", "1"]
    code, out, err = run(capsys, *argv)
    gpus = sorted({e.gpu for e in serve.envelopes()})
    line = (f"note: the serve table has no entry for {UNKNOWN} (it knows {', '.join(gpus)}); "
            "your arguments pass through unchanged")
    assert code == 0
    assert out.splitlines()[0].split() == ["source", "passthrough"]
    assert err.splitlines() == [line]
    code, out, err = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert (data["arch_note"], data["known_arches"], err) == (line, gpus, "")
    code, out, err = run(capsys, "serve", "--arch", "sm86", "--tp", "8", "--context", "262144",
                         "--seqs", "1", "--json")
    assert json.loads(out)["arch_note"] is None and err == ""


def test_an_entry_for_every_arch_knows_them_all(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    spec = KERNELS["c128a"]
    anywhere = spec.make_table([Entry("all", {"num_decode_tokens": 3}, spec.baseline_tile)])
    assert arch_note(UNKNOWN, anywhere, "c128a", "x") is None
    assert known_arches(anywhere) == ((), True)
    path = tmp_path / "t.toml"
    path.write_text(spec.render_table(anywhere.entries))
    code, out, err = run(capsys, *kernel_argv(spec, UNKNOWN), "--table", str(path), "--json")
    assert (code, json.loads(out)["known_arches"], err) == (0, ["any"], "")
    empty = spec.make_table([])
    assert arch_note(UNKNOWN, empty, "c128a", "the launch is the baseline") == (
        f"note: the c128a table has no entry for {UNKNOWN} (it knows none: it has no entries); "
        "the launch is the baseline")


@pytest.mark.parametrize("command", ["keys", "serve", *names()])
def test_every_subcommand_takes_arch(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--arch ARCH" in capsys.readouterr().out
