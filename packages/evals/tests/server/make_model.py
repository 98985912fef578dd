"""Write a tiny Llama model directory for the real-server tests; nothing is downloaded.

Run with the server environment's interpreter (it has ``tokenizers`` and
``transformers``): ``python make_model.py OUT_DIR --seed N``. It generates a corpus of
made-up words (seeded), trains a byte-level BPE tokenizer on it, and writes the
tokenizer, a chat template that renders tools, and a Llama config small enough for
``--load-format dummy`` on two CPU cores. The attention head dimension is 64: vLLM's
CPU attention does not support 16.

The vocabulary carries the Hermes tool-call markers, because vLLM's ``hermes`` tool
parser refuses a tokenizer without them. Only ``<unk>``, ``<s>`` and ``</s>`` are
special (skipped when decoding); the output lists their ids and the markers' so a
test can keep a random-weight model from emitting them (``logit_bias``).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SPECIAL = ["<unk>", "<s>", "</s>"]
# Added as ordinary tokens: they decode to their text, so a dummy-weight model that
# happens to repeat one of them still streams visible text.
MARKERS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
# Chat template: ChatML turns; the tools, when given, are listed in the system turn.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HEAD_DIM = 64


def corpus(rng: random.Random, words: int) -> list[str]:
    """Sentences of made-up lower-case words, plus the digits and punctuation of JSON."""
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    weights = [26 - i for i in range(26)]
    lexicon = ["".join(rng.choices(letters, weights, k=rng.randint(1, 9))) for _ in range(600)]
    lines = []
    for _ in range(words // 12):
        sentence = " ".join(rng.choice(lexicon) for _ in range(12))
        lines.append(sentence.capitalize() + rng.choice([".", ",", "?", '"', ": 0123456789{}[]"]))
    return lines


def write_model(out: Path, seed: int, vocab_size: int = 1024) -> dict:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng, 30_000), trainer=trainer)
    tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKERS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        chat_template=CHAT_TEMPLATE,
    )
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(fast),
        "hidden_size": 2 * HEAD_DIM,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": fast.bos_token_id,
        "eos_token_id": fast.eos_token_id,
        "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return {
        "vocab_size": len(fast),
        "head_dim": HEAD_DIM,
        "dir": str(out),
        "special_ids": sorted(fast.all_special_ids),
        "marker_ids": [fast.convert_tokens_to_ids(m) for m in MARKERS],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    print(json.dumps(write_model(args.out, args.seed)))


if __name__ == "__main__":
    main()
