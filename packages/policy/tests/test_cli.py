"""The dsv4-policy command line as a whole: ``check``, usage errors, bad flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsv4_policy import serve
from dsv4_policy.cli import main
from dsv4_policy.registry import KERNELS

DATA = Path(__file__).parent / "data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_accepts_good_tables(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = [spec.shipped_table().source for spec in KERNELS.values()]
    shipped.append(serve.shipped_table().source)
    code, out, _ = run(capsys, "check", *shipped, str(DATA / "good" / "c128a_example.toml"))
    assert code == 0
    assert out.count("ok   ") == len(shipped) + 1
    assert "serve table, 5 entries" in out


def test_check_fails_on_bad_files_and_prints_every_error(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    bad = tmp_path / "two_errors.toml"
    bad.write_text((DATA / "bad" / "overlap.toml").read_text().replace(
        "num_warps = 4", "num_warps = 6", 1))
    good = DATA / "good" / "c128a_example.toml"
    code, out, _ = run(capsys, "check", str(good), str(bad), str(DATA / "bad" / "syntax.toml"))
    assert code == 1
    assert f"ok   {good}" in out
    assert f"FAIL {bad}: 1 problem(s)" in out
    assert "field launch.num_warps" in out
    assert "not valid TOML" in out
    assert "2 of 3 file(s) failed validation" in out


def test_every_bad_corpus_file_fails_check(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in (DATA / "bad").glob("*.toml"))
    code, out, _ = run(capsys, "check", *files)
    assert code == 1
    assert out.count("FAIL ") == len(files)


@pytest.mark.parametrize("argv, fragment", [
    (["c128a", "--arch", "hopper", "--max-model-len", "1", "--max-seq-len", "1"],
     "Key.arch: arch 'hopper' is not"),
    (["c128a", "--arch", "sm90", "--max-model-len", "0", "--max-seq-len", "1"],
     "Key.max_model_len: 0 is below"),
    (["keys", "--arch", "sm90", "--max-model-len", "-5"], "max_model_len"),
    (["serve", "--arch", "sm86", "--tp", "0", "--context", "1", "--seqs", "1"],
     "ServeKey.tp must be a positive integer"),
    (["serve", "--arch", "sm86", "--tp", "8", "--context", "1", "--seqs", "1", "--env", "NOEQ"],
     "--env 'NOEQ': expected NAME=VALUE"),
    (["c128a", "--arch", "sm90", "--max-model-len", "1", "--max-seq-len", "1", "--table",
      "missing.toml"], "--table missing.toml: invalid C128A table"),
    (["serve", "--arch", "sm86", "--tp", "8", "--context", "1", "--seqs", "1", "--table",
      str(DATA / "bad" / "serve_missing_launch.toml")], "invalid serve table"),
])
def test_usage_errors_exit_2_with_a_clear_message(capsys: pytest.CaptureFixture[str],
                                                  argv: list[str], fragment: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert fragment in err and out == ""


@pytest.mark.parametrize("argv", [[], ["c128a", "--arch", "sm90"], ["nonsense"],
                                  ["check"], ["keys", "--arch", "sm90", "--max-model-len", "x"],
                                  ["keys", "--arch", "sm90", "--max-model-len", "4", "--", "y"]])
def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "usage: dsv4-policy" in capsys.readouterr().err
