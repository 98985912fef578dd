"""The A/B gate on lm-eval-format fixtures: the seed's numbers, regression, noise,
improvement, continuous metrics, the stderr fallback, and malformed input.

Expected counts and p-values are computed here from the generator's specification
(how many documents were lost and won) with an independent binomial sum, never read
back from the gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shutil
from fractions import Fraction
from pathlib import Path

import pytest
from dsv4_evals import ab
from dsv4_evals.ab import Options, compare, load_run
from dsv4_evals.ab.compare import IMPROVEMENT, NO_CHANGE, REGRESSION

DATA = Path(__file__).parent / "data" / "ab"
_spec = importlib.util.spec_from_file_location("ab_fixture_generator", DATA / "generate.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

# The seed's tables (seed 003, ANCHORS.md "Accuracy"): (task, filter) -> value, stderr
SEED_MAIN = {
    ("gpqa_diamond_cot_zeroshot", "flexible-extract"): (0.5051, 0.0356),
    ("gpqa_diamond_cot_zeroshot", "strict-match"): (0.1010, 0.0215),
    ("gsm8k", "flexible-extract"): (0.9462, 0.0062),
    ("gsm8k", "strict-match"): (0.9469, 0.0062),
}
SEED_ADAPTIVE = {
    ("gpqa_diamond_cot_zeroshot", "flexible-extract"): (0.5455, 0.0355),
    ("gpqa_diamond_cot_zeroshot", "strict-match"): (0.0758, 0.0189),
    ("gsm8k", "flexible-extract"): (0.9538, 0.0058),
    ("gsm8k", "strict-match"): (0.9538, 0.0058),
}


def exact_p(lost: int, won: int) -> float:
    n = lost + won
    tail = sum(Fraction(math.comb(n, i), 2**n) for i in range(min(lost, won) + 1))
    return float(min(Fraction(1), 2 * tail))


def holm_expected(ps: list[float]) -> list[float]:
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def run_ab(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="dsv4-evals")
    ab.register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(["ab", *argv])
    return int(ns.func(ns))


def scenario(name: str) -> tuple[Path, Path]:
    return DATA / name / "base", DATA / name / "candidate"


def test_committed_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    gen.main(tmp_path)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(DATA) for p in DATA.rglob("*") if p.is_file() and p.name != "generate.py"
        and "__pycache__" not in p.parts
    )  # fmt: skip
    assert written == committed
    for rel in written:
        assert (tmp_path / rel).read_bytes() == (DATA / rel).read_bytes(), rel


def test_seed_fixture_reproduces_the_seed_tables() -> None:
    base_dir, cand_dir = scenario("seed")
    for run_dir, table in ((base_dir, SEED_MAIN), (cand_dir, SEED_ADAPTIVE)):
        run = load_run(run_dir)
        for (task, filt), (value, se) in table.items():
            s = run.summaries[(task, filt, "exact_match")]
            assert round(s.value, 4) == value
            assert s.stderr is not None and round(s.stderr, 4) == se
            # the per-document scores average to the reported value
            scores = run.samples[(task, filt, "exact_match")]
            assert len(scores) == {"gsm8k": 1319}.get(task, 198)
            assert sum(scores.values()) / len(scores) == pytest.approx(s.value, abs=1e-12)


def test_seed_deltas_are_no_significant_change(capsys) -> None:
    base_dir, cand_dir = scenario("seed")
    report = compare(load_run(base_dir), load_run(cand_dir))
    rows = {(c.task, c.filter): c for c in report.comparisons}
    assert set(rows) == set(SEED_MAIN)
    keys = sorted(rows)
    raw = [exact_p(gen.SEED[k][2], gen.SEED[k][3]) for k in keys]
    adjusted = holm_expected(raw)
    for k, p, p_adj in zip(keys, raw, adjusted, strict=True):
        row = rows[k]
        n, _, lost, won = gen.SEED[k]
        assert row.test == "exact McNemar"
        assert (row.lost, row.won, row.n_paired) == (lost, won, n)
        assert row.p == pytest.approx(p, rel=1e-12)
        assert row.p_adjusted == pytest.approx(p_adj, rel=1e-12)
        assert row.verdict == NO_CHANGE
    # gpqa strict-match fell by 5/198 = 0.0253 and is still not significant
    strict = rows[("gpqa_diamond_cot_zeroshot", "strict-match")]
    assert strict.delta == pytest.approx(-5 / 198)
    assert run_ab("--base", str(base_dir), "--candidate", str(cand_dir)) == 0
    out = capsys.readouterr().out
    assert "| gpqa_diamond_cot_zeroshot | flexible-extract | 0 | exact_match |" in out
    assert "Result: no significant regression" in out


def test_seed_accuracies_with_the_fewest_flips(tmp_path: Path) -> None:
    """The same accuracies, every flip in the net direction: the most favourable pairing."""
    root = gen.generate(tmp_path, "seed_minflip")
    report = compare(load_run(root / "base"), load_run(root / "candidate"))
    rows = {(c.task, c.filter): c for c in report.comparisons}
    keys = sorted(rows)
    raw = [exact_p(gen.SEED_MINFLIP[k][2], gen.SEED_MINFLIP[k][3]) for k in keys]
    for k, p_adj in zip(keys, holm_expected(raw), strict=True):
        row = rows[k]
        assert row.p_adjusted == pytest.approx(p_adj, rel=1e-12)
        expected = NO_CHANGE if p_adj >= 0.05 else (IMPROVEMENT if row.delta > 0 else REGRESSION)
        assert row.verdict == expected, k
    # gpqa strict-match: 5 lost, 0 won -> p = 2/32 = 0.0625: still no significant change
    assert rows[("gpqa_diamond_cot_zeroshot", "strict-match")].verdict == NO_CHANGE
    assert rows[("gsm8k", "flexible-extract")].verdict == IMPROVEMENT


def test_without_samples_the_gate_falls_back_to_a_z_test(capsys) -> None:
    base_dir, cand_dir = scenario("seed_nosamples")
    report = compare(load_run(base_dir), load_run(cand_dir))
    for c in report.comparisons:
        assert c.test == "z-test (unpaired)" and c.n_paired is None
        assert c.base_stderr is not None and c.candidate_stderr is not None
        z = (c.candidate - c.base) / math.sqrt(c.base_stderr**2 + c.candidate_stderr**2)
        assert c.p == pytest.approx(2 * (1 - 0.5 * (1 + math.erf(abs(z) / math.sqrt(2)))))
        assert c.verdict == NO_CHANGE
    assert sum("unpaired two-sample z-test" in n for n in report.notes) == 4
    assert run_ab("--base", str(base_dir), "--candidate", str(cand_dir)) == 0
    assert "z-test (unpaired)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "verdict", "code"),
    [("regression", REGRESSION, 1), ("noise", NO_CHANGE, 0), ("improvement", IMPROVEMENT, 0)],
)
def test_regression_noise_improvement(name: str, verdict: str, code: int, capsys) -> None:
    base_dir, cand_dir = scenario(name)
    spec = gen.LIMITED[name]
    report = compare(load_run(base_dir), load_run(cand_dir))
    raw = [exact_p(spec[(c.task, c.filter)][2], spec[(c.task, c.filter)][3])
           for c in report.comparisons]  # fmt: skip
    for c, p_adj in zip(report.comparisons, holm_expected(raw), strict=True):
        assert (c.lost, c.won) == spec[(c.task, c.filter)][2:]
        assert c.p_adjusted == pytest.approx(p_adj, rel=1e-12)
        assert c.verdict == verdict
    assert run_ab("--base", str(base_dir), "--candidate", str(cand_dir)) == code
    assert ("SIGNIFICANT REGRESSION" in capsys.readouterr().out) == (code == 1)


def test_margin_forgives_small_significant_drops(capsys) -> None:
    base_dir, cand_dir = scenario("regression")
    # strict-match drops 0.08, flexible-extract 0.07 (see the generator)
    report = compare(load_run(base_dir), load_run(cand_dir), Options(margin=0.075))
    verdicts = {c.filter: c.verdict for c in report.comparisons}
    assert verdicts == {"strict-match": REGRESSION, "flexible-extract": NO_CHANGE}
    flex = next(c for c in report.comparisons if c.filter == "flexible-extract")
    assert "within the margin" in flex.detail
    assert run_ab("--base", str(base_dir), "--candidate", str(cand_dir), "--margin", "0.1") == 0
    assert run_ab("--base", str(base_dir), "--candidate", str(cand_dir), "--margin", "0.075") == 1
    capsys.readouterr()


def test_correction_none_reports_raw_p() -> None:
    base_dir, cand_dir = scenario("seed")
    report = compare(load_run(base_dir), load_run(cand_dir), Options(correction="none"))
    assert all(c.p_adjusted == c.p for c in report.comparisons)


def test_continuous_metrics_use_the_paired_bootstrap(capsys) -> None:
    base_dir, cand_dir = scenario("continuous")
    code = run_ab("--base", str(base_dir), "--candidate", str(cand_dir), "--json",
                  "--bootstrap-iters", "2000", "--seed", "5")  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    rows = {c["metric"]: c for c in data["comparisons"]}
    assert {r["test"] for r in rows.values()} == {"paired bootstrap"}
    # the generator lowers rouge1_max by 3 points per document (plus noise); bleu_max is noise
    assert rows["rouge1_max"]["verdict"] == REGRESSION
    assert rows["rouge1_max"]["ci"][1] < 0
    assert rows["bleu_max"]["verdict"] == NO_CHANGE
    assert rows["bleu_max"]["ci"][0] < 0 < rows["bleu_max"]["ci"][1]
    assert code == 1 and data["regression"] is True
    assert data["options"]["seed"] == 5 and data["options"]["bootstrap_iters"] == 2000


# ---- input handling -------------------------------------------------------------------


def _copy(name: str, tmp_path: Path) -> tuple[Path, Path]:
    base_dir, cand_dir = scenario(name)
    shutil.copytree(base_dir, tmp_path / "base")
    shutil.copytree(cand_dir, tmp_path / "candidate")
    return tmp_path / "base", tmp_path / "candidate"


def _samples(root: Path) -> Path:
    return next(root.rglob("samples_*.jsonl"))


def test_docs_in_one_run_only_are_left_out_and_said(tmp_path: Path) -> None:
    base_dir, cand_dir = _copy("noise", tmp_path)
    path = _samples(cand_dir)
    lines = path.read_text().splitlines()
    dropped = {0, 1, 2}
    path.write_text("\n".join(x for x in lines if json.loads(x)["doc_id"] not in dropped) + "\n")
    report = compare(load_run(base_dir), load_run(cand_dir))
    assert all(c.n_paired == 200 - len(dropped) for c in report.comparisons)
    assert any("3 doc_ids present in one run only" in n for n in report.notes)
    assert any("samples average" in n for n in report.notes)


def test_different_documents_under_one_doc_id_are_flagged(tmp_path: Path) -> None:
    base_dir, cand_dir = _copy("noise", tmp_path)
    path = _samples(cand_dir)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for r in recs:
        if r["doc_id"] < 4:
            r["doc_hash"] = "0" * 64
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    report = compare(load_run(base_dir), load_run(cand_dir))
    assert any("4 paired doc_ids have different doc_hash" in n for n in report.notes)


def test_the_newest_results_file_wins(tmp_path: Path) -> None:
    _base_dir, cand_dir = _copy("noise", tmp_path)
    old = next(cand_dir.rglob("results_*.json"))
    data = json.loads(old.read_text())
    data["results"]["gsm8k"]["exact_match,strict-match"] = 0.1
    (old.parent / "results_2026-01-01T00-00-00.000000.json").write_text(json.dumps(data))
    run = load_run(cand_dir)
    assert run.summaries[("gsm8k", "strict-match", "exact_match")].value == pytest.approx(0.895)
    assert any("several results files" in n for n in run.notes)


def test_lower_is_better_metrics_flip_the_direction(tmp_path: Path) -> None:
    base_dir, cand_dir = _copy("improvement", tmp_path)
    for root in (base_dir, cand_dir):
        path = next(root.rglob("results_*.json"))
        data = json.loads(path.read_text())
        data["higher_is_better"]["gsm8k"]["exact_match"] = False
        path.write_text(json.dumps(data))
    report = compare(load_run(base_dir), load_run(cand_dir))
    assert {c.verdict for c in report.comparisons} == {REGRESSION}


def test_malformed_inputs_give_clear_errors(tmp_path: Path, capsys) -> None:
    assert run_ab("--base", str(tmp_path / "missing"), "--candidate", str(tmp_path)) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run_ab("--base", str(tmp_path / "empty"), "--candidate", str(tmp_path / "empty")) == 2
    assert "no results_*.json" in capsys.readouterr().err

    base_dir, cand_dir = _copy("noise", tmp_path / "dup")
    path = _samples(cand_dir)
    first = path.read_text().splitlines()[0]
    path.write_text(path.read_text() + first + "\n")
    assert run_ab("--base", str(base_dir), "--candidate", str(cand_dir)) == 2
    err = capsys.readouterr().err
    assert f"{path}:401" in err and "appears twice" in err

    base_dir, cand_dir = _copy("noise", tmp_path / "nofilter")
    path = _samples(base_dir)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for r in recs:
        del r["filter"]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert run_ab("--base", str(base_dir), "--candidate", str(cand_dir)) == 2
    assert "no 'filter' field" in capsys.readouterr().err

    bad = tmp_path / "bad" / "m"
    bad.mkdir(parents=True)
    (bad / "results_2026.json").write_text('{"version": 1}')
    assert run_ab("--base", str(bad.parent), "--candidate", str(bad.parent)) == 2
    assert "no 'results' object" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_info:
        run_ab("--base", str(DATA / "noise" / "base"), "--candidate",
               str(DATA / "noise" / "candidate"), "--alpha", "1.5")  # fmt: skip
    assert exit_info.value.code == 2
    assert "argument --alpha: expected a number in (0, 1), got 1.5" in capsys.readouterr().err


def test_runs_on_different_tasks_are_refused(capsys) -> None:
    assert run_ab("--base", str(DATA / "noise" / "base"),
                  "--candidate", str(DATA / "continuous" / "candidate")) == 2  # fmt: skip
    assert "share no (task, filter, metric)" in capsys.readouterr().err
