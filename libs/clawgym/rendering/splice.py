"""Assistant-token splicing: a request's prompt reuses the exact ids of the turns the engine generated.

Owns the prompt-building rule of ARCHITECTURE.md §5. Every generated turn is kept as a
`GeneratedTurn` keyed by a chain hash of everything before it plus the turn itself (tools,
then each message's `fingerprint`, which compares assistant turns on text and tool calls by
name/arguments, never on ids or thinking). A new request hashes its own history the same way;
the longest prefix ending in a known generated turn is replaced by that turn's exact prompt +
output ids, and only the messages after it are rendered and tokenized:

    prompt = turn.prompt_ids + turn.output_ids + encode(text that follows the turn)

So a call that extends an earlier one costs rendering + tokenization of the new messages only,
and its prompt starts with the earlier prompt + output exactly. The text that follows a turn
is found by rendering a two-message stand-in (`user, assistant=MARK`) followed by the new
messages and cutting at MARK: the ChatML special tokens at turn boundaries keep BPE from merging
across the cut. Where the harness rewrote history nothing matches and the whole prompt is
rendered from scratch; nothing is forced. Storage of turns is `clawgym.proxy.live`'s job.
"""

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from clawgym.arrays import IDS
from clawgym.protocols.conversation import Conversation, Message, Tool
from clawgym.rendering.template import MARK, ChatTemplate

KEY_BYTES = 16
_STUB = (Message(role="user", content="ping"), Message(role="assistant", content=MARK))


@dataclass(frozen=True)
class GeneratedTurn:
    """A generated assistant turn as kept per rollout: enough to rebuild its prompt + output ids."""

    key: bytes  # chain hash of (tools, history before the turn, the turn)
    parent: bytes  # key of the turn its prompt was spliced onto; b"" if rendered from scratch
    segment: (
        np.ndarray
    )  # int32: prompt ids after the parent's prompt + output (the whole prompt if no parent)
    output: np.ndarray  # int32: the engine's output ids, stop token included


@dataclass(frozen=True)
class HeldTurn:
    """A generated turn whole, as the replica that generated it can keep it (`proxy.held`)."""

    key: bytes  # as GeneratedTurn.key
    ids: np.ndarray  # int32: the turn's whole prompt + output ids
    last_output: int | None  # the turn's last generated id (its stop token, if it stopped)


@dataclass(frozen=True)
class BuiltPrompt:
    array: np.ndarray  # int32 prompt ids, as the engine and the record take them (never a list here)
    prompt_key: bytes  # chain hash of (tools, every message of the request)
    parent: bytes  # key of the spliced turn, b"" if rendered from scratch
    segment_start: int  # ids[segment_start:] are new after the parent's prompt + output
    rendered_tokens: int  # ids produced by tokenizing text in this call
    step_s: dict[str, float] = field(default_factory=dict)  # wall seconds of each build step, in its thread

    @property
    def ids(self) -> list[int]:
        """The prompt ids as a list (a copy: for readers, not the call's path)."""
        return self.array.tolist()

    def __len__(self) -> int:
        return len(self.array)

    @property
    def extended(self) -> bool:
        """The prompt extends an earlier call's prompt + output exactly."""
        return bool(self.parent)


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=KEY_BYTES)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def tools_key(tools: Sequence[Tool]) -> bytes:
    """Root of every chain: the tool list, in order."""
    canon = [[t.name, t.description, t.parameters, t.namespace] for t in tools]
    return _digest(b"clawgym-chain-v1", json.dumps(canon, sort_keys=True, ensure_ascii=False).encode())


def chain_keys(conv: Conversation) -> list[bytes]:
    """keys[i] = chain hash of the tools and messages[0..i]."""
    key = tools_key(conv.tools)
    keys = []
    for m in conv.messages:
        key = _extend(key, m)
        keys.append(key)
    return keys


def _extend(key: bytes, message: Message) -> bytes:
    # the previous key has a fixed length, so key + fingerprint is unambiguous
    return hashlib.blake2b(key + message.fingerprint().encode(), digest_size=KEY_BYTES).digest()


def turn_key(prompt_key: bytes, turn: Message) -> bytes:
    """The key a generated turn is kept under: the prompt's chain extended by the turn."""
    return _extend(prompt_key, turn)


class PromptBuilder:
    """Builds prompt ids for canonical conversations, splicing generated turns where history matches."""

    def __init__(self, template: ChatTemplate) -> None:
        self.template = template
        self._stop_texts = {
            t: template.tokenizer.decode([t], skip_special_tokens=False) for t in template.info.stop_token_ids
        }

    @staticmethod
    def candidate_keys(conv: Conversation, keys: list[bytes] | None = None) -> list[bytes]:
        """Keys of the request's assistant positions: where a generated turn may match."""
        keys = chain_keys(conv) if keys is None else keys
        return [keys[i] for i, m in enumerate(conv.messages) if m.role == "assistant"]

    def build(
        self,
        conv: Conversation,
        turns: Mapping[bytes, GeneratedTurn],
        keys: list[bytes] | None = None,
        held: HeldTurn | None = None,
        max_tokens: int | None = None,
    ) -> BuiltPrompt:
        """The prompt for `conv`, given the generated turns found under its candidate keys
        (`keys`: its `chain_keys`, if already computed) or `held`, one of them whole: the same
        prompt as from its chain of turns, without rebuilding it. `max_tokens` (the context):
        text that could not fit in what the spliced ids leave of it is refused untokenized."""
        c0 = time.perf_counter()
        keys = chain_keys(conv) if keys is None else keys
        prompt_key = keys[-1] if keys else tools_key(conv.tools)
        for i in range(len(conv.messages) - 1, -1, -1):
            if conv.messages[i].role != "assistant":
                continue
            if held is not None and held.key == keys[i]:
                base, last = held.ids, held.last_output
            elif keys[i] in turns:
                base = self._rebuild(keys[i], turns)
                if base is None:
                    continue  # an ancestor expired: try an earlier turn
                output = turns[keys[i]].output
                last = int(output[-1]) if len(output) else None
            else:
                continue
            stop_text = None if last is None else self._stop_texts.get(last)
            c1 = time.perf_counter()
            text = self.continuation(conv.messages[i + 1 :], conv.tools, stop_text)
            c2 = time.perf_counter()
            room = None if max_tokens is None else max_tokens - len(base)
            new = np.asarray(self.template.encode(text, room), dtype=IDS)
            steps = {"splice": c1 - c0, "render": c2 - c1, "tokenize": time.perf_counter() - c2}
            return BuiltPrompt(np.concatenate([base, new]), prompt_key, keys[i], len(base), len(new), steps)
        c1 = time.perf_counter()
        text = self.template.render(conv.messages, conv.tools, add_generation_prompt=True)
        c2 = time.perf_counter()
        ids = np.asarray(self.template.encode(text, max_tokens), dtype=IDS)
        steps = {"splice": c1 - c0, "render": c2 - c1, "tokenize": time.perf_counter() - c2}
        return BuiltPrompt(ids, prompt_key, b"", 0, len(ids), steps)

    def continuation(self, rest: Sequence[Message], tools: Sequence[Tool], stop_text: str | None) -> str:
        """Template text after a generated turn: its closing (less the stop token the engine already
        produced), the messages in `rest`, and the generation prompt."""
        passed = tools if not self.template.info.tools_header_only else ()
        text = self.template.render([*_STUB, *rest], passed, add_generation_prompt=True)
        at = text.find(MARK)
        after = text[at + len(MARK) :] if at >= 0 else text
        if stop_text and after.startswith(stop_text):
            after = after[len(stop_text) :]
        return after

    def count_tokens(self, conv: Conversation, max_tokens: int | None = None) -> int:
        """Prompt length when rendered from scratch (what `count_tokens` answers); text that could
        not fit in `max_tokens` is refused untokenized."""
        return len(self.template.encode(self.template.render(conv.messages, conv.tools, True), max_tokens))

    @staticmethod
    def _rebuild(key: bytes, turns: Mapping[bytes, GeneratedTurn]) -> np.ndarray | None:
        """Prompt + output ids of the turn under `key`, walking its parents; None if one is missing."""
        parts: list[np.ndarray] = []
        seen = set()
        while key:
            turn = turns.get(key)
            if turn is None or key in seen:
                return None
            seen.add(key)
            parts += [turn.output, turn.segment]
            key = turn.parent
        return np.concatenate(parts[::-1]).astype(IDS, copy=False) if parts else np.zeros(0, IDS)
