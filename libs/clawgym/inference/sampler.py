"""Token sampling for the torch engine: temperature, top-k, top-p, per-request seeds, and the logprob to report.

Owns the choice of the next token from one row of logits and the logprob that goes with it. It
does not know about batching or the model; the engine hands it float32 logits per running row.

Logprob convention (see `clawgym.inference.interface`): log softmax(logits / T) at the sampled token,
i.e. under the tempered distribution *before* top-k/top-p truncation; greedy (T = 0) reports the
T = 1 logprob. The trainer recomputes exactly this from its own forward pass.

NaN-proof: a row whose logits (or tempered logprobs) are not all finite is not sampled at all;
it comes back as failed, so the caller fails that request alone, and no garbage token or NaN
logprob ever leaves the sampler. The nucleus always keeps the most likely token.
"""

import math
import secrets
from dataclasses import dataclass

import torch

from clawgym.inference.interface import SamplingParams


def make_generator(seed: int | None) -> torch.Generator:
    """A CPU generator for one request: seeded for reproducible sampling, otherwise from the OS."""
    return torch.Generator().manual_seed(seed if seed is not None else secrets.randbits(63))


def tempered_logprobs(logits: torch.Tensor, temperatures: list[float]) -> torch.Tensor:
    """log softmax(logits / T) per row (T = 0 rows use T = 1).  logits: (B, V) float32 → (B, V)."""
    temps = torch.tensor(
        [t if t > 0 else 1.0 for t in temperatures], dtype=logits.dtype, device=logits.device
    )
    return torch.log_softmax(logits / temps[:, None], dim=-1)


def truncate(logp: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Sets logprobs outside the top-k / nucleus (top-p) support to -inf.  logp: (V,) → (V,)."""
    if top_k > 0 and top_k < logp.shape[-1]:
        kth = torch.topk(logp, top_k).values[-1]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if 0.0 < top_p < 1.0:
        sorted_logp, order = torch.sort(logp, descending=True)
        cumulative = torch.cumsum(sorted_logp.exp(), dim=-1)
        # Keep the smallest prefix whose mass reaches top_p: drop a token when the mass before it already does.
        drop_sorted = (cumulative - sorted_logp.exp()) >= top_p
        drop_sorted[0] = False  # even a top_p that float32 rounds to 0 keeps the most likely token
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logp = logp.masked_fill(drop, float("-inf"))
    return logp


@dataclass(frozen=True)
class Sampled:
    """One sampling step: a token and its logprob per row, -1 and NaN where the row failed."""

    tokens: list[int]
    logprobs: list[float]
    failed: list[int]  # rows whose logits were not finite: nothing was sampled for them


def sample_rows(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> Sampled:
    """Next token and its reported logprob for each row whose logits are finite.  logits: (B, V)."""
    logits = logits.float().cpu()  # the per-request generators are CPU generators
    logp = tempered_logprobs(logits, [p.temperature for p in params])
    # Rows are independent: a NaN row cannot spoil another's log_softmax, only its own.
    finite = (torch.isfinite(logits).all(dim=-1) & ~torch.isnan(logp).any(dim=-1)).tolist()
    tokens, logprobs, failed = [], [], []
    for row, (p, gen) in enumerate(zip(params, generators, strict=True)):
        token = _pick(logits[row], logp[row], p, gen) if finite[row] else -1
        logprob = float(logp[row, token]) if token >= 0 else math.nan
        if not math.isfinite(logprob):  # also a token of probability 0: never report it
            token, logprob = -1, math.nan
            failed.append(row)
        tokens.append(token)
        logprobs.append(logprob)
    return Sampled(tokens, logprobs, failed)


def _pick(logits: torch.Tensor, logp: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> int:
    if p.temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(truncate(logp, p.top_k, p.top_p), dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))
