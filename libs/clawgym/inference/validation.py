"""Request validation shared by every engine: what makes a Generate request malformed.

Owns the rules only (InvalidArgument with a message naming the field); engines call it before
queueing anything, so a bad request never occupies a slot.
"""

import math

from clawgym.errors import InvalidArgument
from clawgym.inference.interface import SamplingParams


def validate_request(prompt_ids: list[int], params: SamplingParams, vocab_size: int, max_context: int) -> int:
    """Checks a request against the model; returns how many tokens it may generate at most."""
    if not prompt_ids:
        raise InvalidArgument("prompt_ids is empty: a request needs at least one prompt token")
    low, high = min(prompt_ids), max(prompt_ids)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise InvalidArgument(f"prompt token id {bad} is outside the vocabulary [0, {vocab_size})")
    if params.max_new_tokens < 0:
        raise InvalidArgument(f"max_new_tokens must be >= 0, got {params.max_new_tokens}")
    room = max_context - len(prompt_ids)
    if room <= 0:
        raise InvalidArgument(
            f"prompt of {len(prompt_ids)} tokens leaves no room in the {max_context}-token context"
        )
    if params.max_new_tokens > room:
        raise InvalidArgument(
            f"prompt ({len(prompt_ids)}) + max_new_tokens ({params.max_new_tokens}) exceeds the "
            f"{max_context}-token context"
        )
    if not math.isfinite(params.temperature) or params.temperature < 0:
        raise InvalidArgument(f"temperature must be a finite number >= 0, got {params.temperature}")
    if not (0.0 <= params.top_p <= 1.0):
        raise InvalidArgument(f"top_p must be in [0, 1] (0 or 1 = off), got {params.top_p}")
    if params.top_k < 0:
        raise InvalidArgument(f"top_k must be >= 0 (0 = off), got {params.top_k}")
    if any(t < 0 or t >= vocab_size for t in params.stop_token_ids):
        raise InvalidArgument(
            f"stop_token_ids must lie in [0, {vocab_size}), got {list(params.stop_token_ids)}"
        )
    return params.max_new_tokens or room
