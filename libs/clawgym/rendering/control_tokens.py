"""Control-token strings in harness text stay text: only the chat template's own structure yields them.

Owns the escape that keeps `<|im_start|>system` written in a user message, a tool result, a tool
schema or a task file from becoming the real `<|im_start|>` token (a forged turn in the training
data). Every string that comes from a harness is escaped before the template renders it: each
occurrence of an added token's text (the tokenizer's control tokens, `<|im_start|>`, `<think>`,
`<tool_call>`, …) becomes `START index END`, two private-use characters around its index, and so
does START itself, so the escape is injective. After rendering, any added-token text left is the
template's (or this package's) structure. `encode` then cuts the rendered text at those tokens,
emits their ids, and tokenizes each run between them with the tokenizer's pipeline minus its
added tokens, escaped strings restored as plain text.

For text without control-token strings this is exactly `tokenizer.encode(text)`: the tokenizer
itself cuts at added tokens and tokenizes the runs between them independently (none of the
policies' added tokens strips whitespace around it), so splicing and identity checks that
re-tokenize history are unaffected. Tokenizers without a `tokenizers` backend fall back to
`split_special_tokens=True`, which protects special tokens only.
"""

import json
import re
from collections.abc import Callable
from typing import Any

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase

from clawgym.rendering.run_cache import RunCache

START, END = "\ue000", "\ue001"  # private use: no tokenizer gives them meaning, no template touches them
# Runs at least this long are kept tokenized (least recently used dropped; `run_cache`): every
# rollout of a harness sends the same ~100 kB system prompt + tools run, which is otherwise
# tokenized anew by each rollout's first call. Exact: each run is tokenized on its own either way.
LONG_RUN_CHARS = 2048
RUN_CACHE_SIZE = 64
RUN_CACHE_BYTES = 32 * 2**20


class ControlTokens:
    """Escapes harness strings before rendering and tokenizes the rendered text."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        run_cache: int = RUN_CACHE_SIZE,
        run_cache_bytes: int = RUN_CACHE_BYTES,
    ) -> None:
        self.ids = {a.content: i for i, a in tokenizer.added_tokens_decoder.items() if a.content}
        self.literals = [START, *sorted(self.ids, key=len, reverse=True)]  # longest first: alternation order
        self._index = {text: i for i, text in enumerate(self.literals)}
        self._escapable = re.compile("|".join(re.escape(t) for t in self.literals))
        structure = "|".join(re.escape(t) for t in self.literals[1:])
        self._pieces = re.compile(f"{START}(\\d+){END}" + (f"|{structure}" if structure else ""))
        self._encode_runs = _plain_encoder(tokenizer)
        self._long_runs = (
            RunCache(lambda run: tuple(self._encode_runs([run])[0]), run_cache, run_cache_bytes)
            if run_cache > 0 and run_cache_bytes > 0
            else None
        )

    # --- before rendering ---

    def escape(self, value: Any) -> Any:
        """`value` with every control-token string in it escaped: strings, and lists and dicts
        (keys too) of them, as JSON arguments and schemas are; other values unchanged."""
        if isinstance(value, str):
            if not self._escapable.search(value):
                return value
            return self._escapable.sub(lambda m: f"{START}{self._index[m.group(0)]}{END}", value)
        if isinstance(value, dict):
            return {self.escape(k): self.escape(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.escape(v) for v in value]
        return value

    # --- after rendering ---

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Token ids of rendered text: added-token text left in it (the template's structure) is
        that token, every run between is ordinary text (escaped strings restored as text).
        `max_tokens`: a long run with more ids than this is not kept tokenized (it fits no prompt)."""
        runs: list[str] = []  # runs[i] precedes tokens[i]; the last run follows the last token
        tokens: list[int] = []
        run: list[str] = []
        pos = 0
        for m in self._pieces.finditer(text):
            run.append(text[pos : m.start()])
            pos = m.end()
            if m.group(1) is not None:
                run.append(self.literals[int(m.group(1))])
            else:
                runs.append("".join(run))
                tokens.append(self.ids[m.group(0)])
                run = []
        run.append(text[pos:])
        runs.append("".join(run))
        encoded = self._encode(runs, max_tokens)
        ids: list[int] = []
        for i, token in enumerate(tokens):
            ids += encoded[i]
            ids.append(token)
        ids += encoded[-1]
        return ids

    def _encode(self, runs: list[str], max_tokens: int | None = None) -> list[list[int]]:
        """Each run's ids; long runs from the cache (tokenized once), the rest in one batch."""
        cached = self._long_runs
        if cached is None:
            return self._encode_runs(runs)
        encoded = self._encode_runs([r if len(r) < LONG_RUN_CHARS else "" for r in runs])
        return [
            list(cached.get(r, max_tokens)) if len(r) >= LONG_RUN_CHARS else e
            for r, e in zip(runs, encoded, strict=True)
        ]


def _plain_encoder(tokenizer: PreTrainedTokenizerBase) -> Callable[[list[str]], list[list[int]]]:
    """Tokenizes texts as ordinary text: the tokenizer's normalizer, pre-tokenizer and model
    without its added tokens (so no text becomes one), no BOS/EOS."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, Tokenizer):
        spec = json.loads(backend.to_str())
        spec["added_tokens"] = []
        plain = Tokenizer.from_str(json.dumps(spec))
        plain.no_truncation()
        plain.no_padding()

        def encode(texts: list[str]) -> list[list[int]]:
            nonempty = [t for t in texts if t]
            done = iter(e.ids for e in plain.encode_batch(nonempty, add_special_tokens=False))
            return [next(done) if t else [] for t in texts]

        return encode

    def encode_slow(texts: list[str]) -> list[list[int]]:
        return [
            list(tokenizer(t, add_special_tokens=False, split_special_tokens=True)["input_ids"]) if t else []
            for t in texts
        ]

    return encode_slow
