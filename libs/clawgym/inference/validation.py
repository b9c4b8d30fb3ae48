"""Request validation shared by every engine: what makes a Generate request malformed.

Owns the rules only (InvalidArgument with a message naming the field); engines call it before
queueing anything, so a bad request never occupies a slot.

Sampling parameters must be ones the engine can sample with in float32, where it tempers logits:
- temperature: 0 (greedy) or in [MIN_TEMPERATURE, FLOAT32_MAX]. Below 0.01 (vLLM's own floor,
  which it clamps to silently), logits / T grows past any useful precision and, for T under
  ~1e-38, T itself becomes 0 or a subnormal in float32 and logits / T turns into inf / NaN
  (1e-320 did, and NaN reached the sampler). At T >= 0.01 the tempered logits are at most 100x
  the model's (|logit| < 1e4 for any sane policy), far below float32's 3.4e38; a client that
  wants near-greedy sends 0. Above FLOAT32_MAX, T is inf in float32 and inf / inf is NaN.
- top_p: 0 or 1 (off), or in [FLOAT32_TINY, 1): a positive top_p that float32 rounds to 0 or a
  subnormal would keep no token at all (the nucleus test compares against it in float32).
"""

import math

import numpy as np

from clawgym.errors import InvalidArgument
from clawgym.inference.interface import SamplingParams

MIN_TEMPERATURE = float(np.float32(0.01))  # 0.01 as float32: what the gRPC wire makes of 0.01
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 2.0**-126  # the smallest positive normal float32, 1.1754944e-38


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
    check_sampling(params)
    if params.top_k < 0:
        raise InvalidArgument(f"top_k must be >= 0 (0 = off), got {params.top_k}")
    if any(t < 0 or t >= vocab_size for t in params.stop_token_ids):
        raise InvalidArgument(
            f"stop_token_ids must lie in [0, {vocab_size}), got {list(params.stop_token_ids)}"
        )
    return params.max_new_tokens or room


def check_sampling(params: SamplingParams) -> None:
    """Refuses sampling parameters the engine cannot sample with in float32 (module docstring)."""
    t = params.temperature
    if not math.isfinite(t) or t < 0 or 0 < t < MIN_TEMPERATURE or t > FLOAT32_MAX:
        raise InvalidArgument(
            f"temperature must be 0 (greedy) or in [{MIN_TEMPERATURE:.3g}, {FLOAT32_MAX:.7g}], got {t!r}"
        )
    p = params.top_p
    if not (0.0 <= p <= 1.0):
        raise InvalidArgument(f"top_p must be in [0, 1] (0 or 1 = off), got {p!r}")
    if 0 < p < FLOAT32_TINY:
        raise InvalidArgument(
            f"top_p {p!r} is below {FLOAT32_TINY:.8g}: float32 rounds it away and it would keep no token"
        )
