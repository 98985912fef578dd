"""Prompts sized to an envelope's context, without a tokenizer on the client.

Decode speed at long context depends on how much KV each step attends over, so the
ladder fills a chosen fraction of the context (``--prompt-fraction``, or an exact
``--prompt-tokens``). The client has no tokenizer, so it builds text from a fixed
list of common English words and converts tokens to words with a ratio:

* ``--words-per-token`` (default 0.75, typical of English under BPE vocabularies), or
* a ratio measured on the server: when it offers vLLM's ``POST /tokenize``, a sample
  of the same word stream is tokenized once and the ratio is taken from it, and the
  final prompt is counted exactly and trimmed if it overshoots.

All sequences of one envelope share the prompt body and differ only in a short
suffix. With prefix caching on, later sequences then skip most of their prefill, so
all of them reach decode together and the overlap window (see ``measure``) covers
the steady concurrent state even at 262K context.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_WORDS_PER_TOKEN = 0.75
# Room for chat-template and BOS tokens around the body.
TEMPLATE_MARGIN_TOKENS = 32
_SEED = 4004

_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her they this which "
    "river mountain window garden letter market engine station harbor village winter "
    "summer morning evening silver copper paper stone glass water bridge forest field "
    "road house light music story number table chair kitchen teacher doctor farmer "
    "painter sailor soldier student friend mother father sister brother city country "
    "island valley desert ocean cloud thunder shadow signal pattern measure balance "
    "question answer reason season moment history science theory method system "
    "quickly slowly quietly brightly carefully gently simply nearly always never "
    "often again later early together alone above below across along behind beyond "
    "walks carries builds opens closes watches follows remembers gathers explains "
    "green golden narrow ancient distant gentle heavy hollow patient steady"
)
_WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class PromptPlan:
    """How many tokens a prompt should have and how many words that takes."""

    target_tokens: int
    words: int
    words_per_token: float
    ratio_source: str  # "assumed" or "measured"


def target_tokens(
    context: int, max_tokens: int, fraction: float, explicit: int | None
) -> int:
    """The prompt length for ``context``: explicit, or ``fraction`` of it, always leaving
    room for ``max_tokens`` generated tokens and the template margin."""
    room = context - max_tokens - TEMPLATE_MARGIN_TOKENS
    if room < 1:
        raise ValueError(
            f"context {context} leaves no room for a prompt with --max-tokens {max_tokens} "
            f"(and {TEMPLATE_MARGIN_TOKENS} tokens of template margin); lower --max-tokens"
        )
    want = explicit if explicit is not None else int(fraction * context)
    return max(1, min(want, room))


def words_text(count: int, seed: int = _SEED) -> str:
    """``count`` words drawn reproducibly from the word list, in short sentences."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(count):
        word = rng.choice(_WORDS)
        out.append(word.capitalize() if i == 0 or out[-1].endswith(".") else word)
        if rng.random() < 0.08:
            out[-1] += "."
    return " ".join(out)


def prompts(body_words: int, seqs: int, shared_prefix: bool = True) -> list[str]:
    """One prompt per sequence: a shared body (or a distinct one each) plus a suffix."""
    if shared_prefix:
        body = words_text(body_words)
        return [f"{body}\n\nRequest {i + 1}: continue the text." for i in range(seqs)]
    return [
        f"{words_text(body_words, seed=_SEED + i)}\n\nRequest {i + 1}: continue the text."
        for i in range(seqs)
    ]


def plan(target: int, words_per_token: float, ratio_source: str) -> PromptPlan:
    if words_per_token <= 0:
        raise ValueError(f"words per token must be positive, got {words_per_token}")
    return PromptPlan(target, max(1, round(target * words_per_token)), words_per_token,
                      ratio_source)
