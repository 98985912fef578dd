"""The dsv4-policy command line, driven through main(argv)."""

from __future__ import annotations

import json
import random
import shlex
from pathlib import Path

import pytest
from dsv4_policy import c128a
from dsv4_policy.cli import main
from policy_strategies import oracle_baseline

DATA = Path(__file__).parent / "data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_c128a_prints_an_aligned_table_with_the_baseline(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    rng = random.Random(3)
    msl = rng.randint(20_000, 30_000)
    code, out, _ = run(capsys, "c128a", "--arch", "sm86", "--max-model-len", "1048576",
                       "--max-seq-len", str(msl))
    assert code == 0
    rows = dict(line.split(None, 1) for line in out.splitlines()[2:])
    assert out.splitlines()[1].startswith("-----")
    assert rows["width"] == "256" and rows["row_stride"] == "8192"
    assert rows["source"] == "baseline" and rows["capacity"] == "8192"
    assert rows["key.max_seq_len"] == str(msl)
    starts = {line.index(value) for line in out.splitlines()[2:]
              for value in [line.split(None, 1)[1]]}
    assert len(starts) == 1  # one aligned value column


def test_c128a_json_matches_resolve(capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(5)
    for _ in range(20):
        args = {"arch": rng.choice(["sm80", "sm90", "sm120", "sm100"]),
                "compress-ratio": rng.choice([4, 128]), "max-model-len": rng.randint(1, 1 << 20),
                "max-seq-len": rng.randint(0, 1 << 20), "num-decode-tokens": rng.randint(0, 64),
                "num-prefill-tokens": rng.choice([0, rng.randint(1, 9000)]),
                "block-size": rng.choice([1, 2, 64])}
        argv = ["c128a", "--json"] + [x for k, v in args.items() for x in (f"--{k}", str(v))]
        code, out, _ = run(capsys, *argv)
        data = json.loads(out)
        key = c128a.Key(**data["key"])
        assert code == 0
        assert data["launch"] == json.loads(json.dumps(c128a.resolve(key).__dict__))
        assert data["compile_key"] == list(c128a.resolve(key).compile_key())
        assert data["capacity"] == oracle_baseline(key)["row_stride"]


def test_c128a_uses_a_given_table(capsys: pytest.CaptureFixture[str]) -> None:
    table = DATA / "good" / "c128a_example.toml"
    code, out, _ = run(capsys, "c128a", "--arch", "sm90a", "--max-model-len", "1048576",
                       "--max-seq-len", "100000", "--num-prefill-tokens", "0", "--table",
                       str(table), "--json")
    launch = json.loads(out)["launch"]
    assert code == 0
    assert launch["source"] == "table:sm90-decode-long"
    assert (launch["cols_per_program"], launch["split_width"]) == (2048, True)
    assert launch["row_stride"] == 8192 and launch["width"] == 1024


def test_keys_lists_the_baseline_and_the_reachable_entries(capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    table = str(DATA / "good" / "c128a_example.toml")
    code, out, _ = run(capsys, "keys", "--arch", "sm90", "--max-model-len", "1048576",
                       "--table", table, "--json")
    assert code == 0
    listed = {(k["tokens_per_program"], k["cols_per_program"], k["num_warps"]): k["sources"]
              for k in json.loads(out)["compile_keys"]}
    assert listed == {(1, 1024, 4): ["baseline"], (4, 256, 4): ["table:sm90-decode-short"],
                      (1, 2048, 4): ["table:sm90-decode-long"]}
    code, out, _ = run(capsys, "keys", "--arch", "sm80", "--max-model-len", "4096",
                       "--table", table)
    assert code == 0
    assert out.splitlines()[0].split() == ["tokens_per_program", "cols_per_program",
                                           "num_warps", "from"]
    assert out.splitlines()[2].split() == ["1", "1024", "4", "baseline"]
    assert len(out.splitlines()) == 3


def test_keys_table_counts_the_entries_behind_each_key(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    table = tmp_path / "t.toml"
    entries = [c128a.Entry(f"e{i}", {"arch": "sm90", "num_decode_tokens": i}, c128a.Tile(*tile))
               for i, tile in enumerate([(1, 1024, 4), (2, 256, 4), (2, 256, 4)])]
    table.write_text(c128a.render_table(entries))
    code, out, _ = run(capsys, "keys", "--arch", "sm90", "--max-model-len", "8", "--table",
                       str(table))
    assert code == 0
    assert [line.split(None, 3) for line in out.splitlines()[2:]] == [
        ["1", "1024", "4", "baseline + 1 entry"], ["2", "256", "4", "2 entries"]]


def test_keys_with_the_shipped_table_match_compile_keys(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    code, out, _ = run(capsys, "keys", "--arch", "sm90", "--max-model-len", "1048576", "--json")
    listed = {tuple(k[f] for f in ("tokens_per_program", "cols_per_program", "num_warps"))
              for k in json.loads(out)["compile_keys"]}
    assert code == 0
    assert listed == c128a.compile_keys(None, "sm90", 1 << 20)


def test_serve_prints_the_262k_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "serve", "--gpu", "sm86", "--tp", "8", "--context", "262144",
                       "--seqs", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["source", "envelope:sm86-tp8-262k-x1"]
    assert "59.6 tok/s" in lines[1]
    command = shlex.split(lines[2].split(None, 1)[1])
    assert command[:3] == ["vllm", "serve", "MODEL"]
    assert command[command.index("--max-model-len") + 1] == "262144"
    assert json.loads(command[command.index("--compilation-config") + 1]) == {
        "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1]}
    assert "FUSE_ALLREDUCE_RMS                        1" in out
    assert "violations\n(none)" in out


def test_serve_passes_an_unknown_gpu_through(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "serve", "--gpu", "sm80", "--tp", "8", "--context", "262144",
                       "--seqs", "1")
    assert code == 0
    assert out.splitlines()[0].split() == ["source", "passthrough"]
    assert out.splitlines()[1].split() == ["expected", "rate", "-"]
    assert out.splitlines()[2].split(None, 1)[1] == "vllm serve MODEL"


def test_serve_json_with_extra_args_and_env_reports_violations(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "serve", "--gpu", "sm86", "--tp", "8", "--context", "180224",
                       "--seqs", "2", "--env", "SPECULATIVE_CONFIG=mtp", "--json", "--",
                       "--served-model-name", "x", "-dcp", "2")
    data = json.loads(out)
    assert code == 1
    assert data["key"] == {"gpu": "sm86", "tp": 8, "context": 180224, "seqs": 2}
    assert data["source"] == "envelope:sm86-tp8-176k-x2"
    assert data["argv"][-4:] == ["--served-model-name", "x", "-dcp", "2"]
    assert data["env"]["SPECULATIVE_CONFIG"] == "mtp"
    assert [v["rule"] for v in data["violations"]] == ["avoid-decode-context-parallel",
                                                      "avoid-speculative-decoding"]
    code, out, _ = run(capsys, "serve", "--gpu", "sm86", "--tp", "8", "--context", "180224",
                       "--seqs", "2", "--", "--enforce-eager")
    assert code == 1
    assert "keep-cuda-graphs  --enforce-eager" in out


def test_check_accepts_good_tables(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = [c128a.shipped_table().source]
    from dsv4_policy import serve

    shipped.append(serve.shipped_table().source)
    code, out, _ = run(capsys, "check", *shipped, str(DATA / "good" / "c128a_example.toml"))
    assert code == 0
    assert out.count("ok   ") == 3
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
    (["serve", "--gpu", "sm86", "--tp", "0", "--context", "1", "--seqs", "1"],
     "ServeKey.tp must be a positive integer"),
    (["serve", "--gpu", "sm86", "--tp", "8", "--context", "1", "--seqs", "1", "--env", "NOEQ"],
     "--env 'NOEQ': expected NAME=VALUE"),
    (["c128a", "--arch", "sm90", "--max-model-len", "1", "--max-seq-len", "1", "--table",
      "missing.toml"], "--table missing.toml: invalid C128A table"),
    (["serve", "--gpu", "sm86", "--tp", "8", "--context", "1", "--seqs", "1", "--table",
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
