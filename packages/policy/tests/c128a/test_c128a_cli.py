"""``dsv4-policy c128a`` and ``keys`` for C128A, driven through main(argv)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from dsv4_policy.cli import main
from dsv4_policy.kernels import c128a
from policy_strategies import oracle_baseline

DATA = Path(__file__).parents[1] / "data"


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
