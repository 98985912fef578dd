"""Generate the A/B gate's fixtures: lm-eval output directories with per-sample logs.

Run ``python generate.py [OUT]`` (default: this folder). Everything is seeded, so the
committed files are exactly what this script writes; a test regenerates them and
compares bytes.

Each scenario is a pair of lm-eval ``--output_path`` folders, ``base/`` and
``candidate/``, holding ``<model>/results_<date>.json`` and
``<model>/samples_<task>_<date>.jsonl`` as lm-eval writes them with ``--log_samples``.
A 0/1 metric is specified by four counts per (task, filter): the base's correct
documents, and the documents the candidate *lost* (base right, candidate wrong) and
*won* (base wrong, candidate right). Which documents those are is drawn at random.

Scenarios:
  seed          the seed's tables: gpqa_diamond_cot_zeroshot (198 docs) and gsm8k
                5-shot (1319 docs), main vs adaptive width, with a realistic share of
                documents that flip between the two greedy runs
  seed_minflip  the same accuracies with the fewest possible flips (every flip in
                the direction of the net change): the pairing most favourable to
                finding a difference (not committed: tests write it on demand)
  seed_nosamples  the seed's results files only, no samples
  regression / noise / improvement   gsm8k with --limit 200
  continuous    truthfulqa_gen per-sample rouge1_max (drops) and bleu_max (noise)
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from pathlib import Path

MODEL = "dsv4-flash"
BASE_DATE = "2026-08-18T09-12-33.104233"
CAND_DATE = "2026-08-18T11-40-02.551870"
GEN_KWARGS = {"max_gen_toks": 32768, "temperature": 0.0, "do_sample": False}

GPQA = "gpqa_diamond_cot_zeroshot"
GSM8K = "gsm8k"
TASK_META = {
    GPQA: {"version": 2.2, "n_shot": 0, "original": 198},
    GSM8K: {"version": 3.0, "n_shot": 5, "original": 1319},
    "truthfulqa_gen": {"version": 3.0, "n_shot": 0, "original": 817},
}
FILTERS = ("strict-match", "flexible-extract")

# (task, filter) -> (n docs, base correct, lost, won)
SEED = {
    (GPQA, "strict-match"): (198, 20, 12, 7),  # 0.1010 -> 0.0758
    (GPQA, "flexible-extract"): (198, 100, 20, 28),  # 0.5051 -> 0.5455
    (GSM8K, "strict-match"): (1319, 1249, 14, 23),  # 0.9469 -> 0.9538
    (GSM8K, "flexible-extract"): (1319, 1248, 15, 25),  # 0.9462 -> 0.9538
}
SEED_MINFLIP = {
    (GPQA, "strict-match"): (198, 20, 5, 0),
    (GPQA, "flexible-extract"): (198, 100, 0, 8),
    (GSM8K, "strict-match"): (1319, 1249, 0, 9),
    (GSM8K, "flexible-extract"): (1319, 1248, 0, 10),
}
LIMITED = {
    "regression": {
        (GSM8K, "strict-match"): (200, 180, 18, 2),  # 0.900 -> 0.820
        (GSM8K, "flexible-extract"): (200, 182, 17, 3),  # 0.910 -> 0.840
    },
    "noise": {
        (GSM8K, "strict-match"): (200, 180, 5, 4),  # 0.900 -> 0.895
        (GSM8K, "flexible-extract"): (200, 181, 4, 6),  # 0.905 -> 0.915
    },
    "improvement": {
        (GSM8K, "strict-match"): (200, 150, 2, 18),  # 0.750 -> 0.830
        (GSM8K, "flexible-extract"): (200, 152, 3, 17),  # 0.760 -> 0.830
    },
}
SCENARIOS = ("seed", "seed_nosamples", "seed_minflip", *LIMITED, "continuous")
# Written by default; seed_minflip is only the seed with other flips, so tests build it.
COMMITTED = ("seed", "seed_nosamples", *LIMITED, "continuous")
SEED_BASE = 20260818


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def paired_outcomes(rng: random.Random, n: int, correct: int, lost: int, won: int):
    """Per-doc (base, candidate) 0/1 scores with exactly these counts."""
    if not (0 <= lost <= correct and 0 <= won <= n - correct):
        raise ValueError(f"impossible counts n={n} correct={correct} lost={lost} won={won}")
    kinds = (
        [(1, 1)] * (correct - lost) + [(1, 0)] * lost + [(0, 1)] * won
        + [(0, 0)] * (n - correct - won)
    )  # fmt: skip
    rng.shuffle(kinds)
    return kinds


def doc_for(task: str, doc_id: int) -> dict:
    if task == GPQA:
        return {"Question": f"gpqa diamond question {doc_id}", "Correct Answer": "(A)"}
    if task == GSM8K:
        return {"question": f"gsm8k test question {doc_id}", "answer": f"#### {doc_id % 97}"}
    return {"question": f"truthfulqa question {doc_id}", "best_answer": f"answer {doc_id}"}


def target_for(task: str, doc_id: int) -> str:
    if task == GPQA:
        return "(A)"
    return str(doc_id % 97) if task == GSM8K else f"answer {doc_id}"


def sample_line(task: str, doc_id: int, filt: str, scores: dict[str, float], wrong: bool) -> str:
    doc = doc_for(task, doc_id)
    target = target_for(task, doc_id)
    prompt = f"Q: {doc.get('question', doc.get('Question'))}\nA:"
    answer = target if not wrong else ("(C)" if task == GPQA else "[invalid]")
    rec = {
        "doc_id": doc_id,
        "doc": doc,
        "target": target,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": GEN_KWARGS}},
        "resps": [[f"... so the answer is {answer}"]],
        "filtered_resps": [answer],
        "filter": filt,
        "metrics": sorted(scores),
        "doc_hash": sha(json.dumps(doc, indent=2, ensure_ascii=False)),
        "prompt_hash": sha(prompt),
        "target_hash": sha(target),
    }
    rec.update(scores)
    return json.dumps(rec, ensure_ascii=False)


def mean_stderr(values: list[float]) -> float:
    """lm-eval's stderr of a mean: sample standard deviation over sqrt(n)."""
    n = len(values)
    mu = math.fsum(values) / n
    return math.sqrt(math.fsum((v - mu) ** 2 for v in values) / (n - 1)) / math.sqrt(n)


def results_file(task_rows: dict[str, dict[str, list[float]]], n_docs: dict[str, int]) -> dict:
    """task -> {"metric,filter": per-doc values} -> an lm-eval results document."""
    results, hib = {}, {}
    for task, series in task_rows.items():
        entry: dict[str, object] = {"alias": task}
        for name, values in sorted(series.items()):
            metric, filt = name.split(",")
            entry[name] = math.fsum(values) / len(values)
            entry[f"{metric}_stderr,{filt}"] = mean_stderr(values)
            hib.setdefault(task, {})[metric] = True
        results[task] = entry
    tasks = sorted(task_rows)
    return {
        "results": results,
        "group_subtasks": {t: [] for t in tasks},
        "configs": {
            t: {"task": t, "num_fewshot": TASK_META[t]["n_shot"], "generation_kwargs": GEN_KWARGS}
            for t in tasks
        },
        "versions": {t: TASK_META[t]["version"] for t in tasks},
        "n-shot": {t: TASK_META[t]["n_shot"] for t in tasks},
        "higher_is_better": hib,
        "n-samples": {
            t: {"original": TASK_META[t]["original"], "effective": n_docs[t]} for t in tasks
        },
        "config": {
            "model": "local-completions",
            "model_args": f"model={MODEL},base_url=http://127.0.0.1:18004/v1/completions,"
            "num_concurrent=32,tokenized_requests=False",
            "gen_kwargs": GEN_KWARGS,
            "random_seed": 0,
        },
        "model_name": MODEL,
        "model_name_sanitized": MODEL,
    }


def write_side(folder: Path, date: str, per_task: dict, with_samples: bool) -> None:
    """per_task: task -> {filter -> {doc_id -> {metric: value}}}."""
    folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, list[float]]] = {}
    n_docs = {}
    for task, by_filter in per_task.items():
        lines = []
        for filt, docs in by_filter.items():
            n_docs[task] = len(docs)
            for doc_id in sorted(docs):
                scores = docs[doc_id]
                for metric, value in scores.items():
                    rows.setdefault(task, {}).setdefault(f"{metric},{filt}", []).append(value)
                wrong = scores.get("exact_match", 1.0) == 0.0
                lines.append(sample_line(task, doc_id, filt, scores, wrong))
        if with_samples:
            (folder / f"samples_{task}_{date}.jsonl").write_text("\n".join(lines) + "\n")
    doc = results_file(rows, n_docs)
    (folder / f"results_{date}.json").write_text(json.dumps(doc, indent=2) + "\n")


def binary_scenario(rng: random.Random, spec: dict) -> tuple[dict, dict]:
    base: dict = {}
    cand: dict = {}
    for (task, filt), (n, correct, lost, won) in sorted(spec.items()):
        pairs = paired_outcomes(rng, n, correct, lost, won)
        base.setdefault(task, {})[filt] = {
            i: {"exact_match": float(b)} for i, (b, _) in enumerate(pairs)
        }
        cand.setdefault(task, {})[filt] = {
            i: {"exact_match": float(c)} for i, (_, c) in enumerate(pairs)
        }
    return base, cand


def write_scenario(out: Path, name: str, base: dict, cand: dict, *, split_tasks: bool,
                   with_samples: bool = True) -> None:  # fmt: skip
    for side, date, data in (("base", BASE_DATE, base), ("candidate", CAND_DATE, cand)):
        if split_tasks:  # one lm-eval invocation per task, as in the seed
            for task in sorted(data):
                write_side(out / name / side / task / MODEL, date, {task: data[task]}, with_samples)
        else:
            write_side(out / name / side / MODEL, date, data, with_samples)


def continuous_scenario(rng: random.Random, n: int = 300) -> tuple[dict, dict]:
    base_docs, cand_docs = {}, {}
    for i in range(n):
        r1 = min(100.0, max(0.0, rng.gauss(45.0, 12.0)))
        b1 = min(100.0, max(0.0, rng.gauss(20.0, 8.0)))
        base_docs[i] = {"rouge1_max": round(r1, 4), "bleu_max": round(b1, 4)}
        cand_docs[i] = {
            "rouge1_max": round(min(100.0, max(0.0, r1 - 3.0 + rng.gauss(0.0, 4.0))), 4),
            "bleu_max": round(min(100.0, max(0.0, b1 + rng.gauss(0.0, 4.0))), 4),
        }
    return {"truthfulqa_gen": {"none": base_docs}}, {"truthfulqa_gen": {"none": cand_docs}}


def generate(out: Path, name: str) -> Path:
    """Write one scenario under ``out/name``; each scenario has its own seeded stream."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    rng = random.Random(f"{SEED_BASE}-{name}")
    if name in ("seed", "seed_nosamples"):
        base, cand = binary_scenario(random.Random(f"{SEED_BASE}-seed"), SEED)
        write_scenario(out, name, base, cand, split_tasks=True, with_samples=name == "seed")
    elif name == "seed_minflip":
        base, cand = binary_scenario(rng, SEED_MINFLIP)
        write_scenario(out, name, base, cand, split_tasks=True)
    elif name == "continuous":
        base, cand = continuous_scenario(rng)
        write_scenario(out, name, base, cand, split_tasks=False)
    else:
        base, cand = binary_scenario(rng, LIMITED[name])
        write_scenario(out, name, base, cand, split_tasks=False)
    return out / name


def main(out: Path, names: tuple[str, ...] = COMMITTED) -> None:
    for name in names:
        generate(out, name)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
