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


def tempered(logits: torch.Tensor, temperatures: list[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row (T = 0 rows use T = 1): its max, T, and exp((logits - max) / T), the unnormalised
    tempered distribution. Tempered logprobs are (logits - max) / T - log(sum of that).  logits:
    (B, V) float32 → (B, 1), (B, 1), (B, V); the one (B, V) result is the only one allocated: on a
    32 x 49k batch each fresh temporary costs more in page faults than its arithmetic."""
    temps = torch.tensor(
        [t if t > 0 else 1.0 for t in temperatures], dtype=logits.dtype, device=logits.device
    )[:, None]
    top = logits.amax(dim=-1, keepdim=True)
    return top, temps, (logits - top).div_(temps).exp_()


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
    """Next token and its reported logprob for each row whose logits are finite.  logits: (B, V).

    Whole-batch passes over the logits, in place where they can be (a 32 x 49k step: 5-10 ms on
    one core, `bench/sampler.py`); a row with top-k / top-p is truncated alone, and each reported
    logprob is read at its one position."""
    logits = logits.float().cpu()  # the per-request generators are CPU generators
    top, temps, weights = tempered(logits, [p.temperature for p in params])
    log_norm = weights.sum(dim=-1, keepdim=True).log_()  # before any row is truncated
    # A row's sum is not finite iff the row holds a NaN or an infinity (finite logits this large
    # are garbage too); rows are independent, so a bad row spoils only itself.
    finite = (torch.isfinite(logits.sum(dim=-1)) & torch.isfinite(log_norm.squeeze(1))).tolist()
    picked = [-1] * len(params)
    greedy = [row for row, p in enumerate(params) if finite[row] and p.temperature <= 0]
    if greedy:
        for row, token in zip(greedy, logits[greedy].argmax(dim=-1).tolist(), strict=True):
            picked[row] = token
    drawn = [row for row, p in enumerate(params) if finite[row] and p.temperature > 0]
    if drawn:
        support = weights if len(drawn) == len(params) else weights[drawn]
        for i, row in enumerate(drawn):
            if params[row].top_k > 0 or 0.0 < params[row].top_p < 1.0:
                logp = support[i].log() - log_norm[row]
                support[i] = truncate(logp, params[row].top_k, params[row].top_p).exp_()
        for row, token in zip(drawn, draw(support, [generators[row] for row in drawn]), strict=True):
            picked[row] = token
    at = torch.tensor([max(t, 0) for t in picked])[:, None]
    read = ((logits.gather(1, at) - top) / temps - log_norm).squeeze(1).tolist()
    tokens, logprobs, failed = [], [], []
    for row, token in enumerate(picked):
        logprob = read[row] if token >= 0 else math.nan
        if not math.isfinite(logprob):  # also a token of probability 0: never report it
            token, logprob = -1, math.nan
            failed.append(row)
        tokens.append(token)
        logprobs.append(logprob)
    return Sampled(tokens, logprobs, failed)


def draw(probs: torch.Tensor, generators: list[torch.Generator]) -> list[int]:
    """One token per row of `probs` (n, V; unnormalised; overwritten with its cumulative sum), by
    inverse CDF with one uniform from each row's generator.

    `torch.multinomial` over a 49k vocabulary cost ~1.5 ms a row (a sixth of a 32-row decode step
    of SmolLM2 on 2 cores); one batched cumulative sum and a binary search cost a few µs a row. The
    sum and the uniform are float32, as multinomial's own are for float32 input, so a token's
    chance is its probability to within ~1e-7; a token of probability 0 adds nothing to the sum,
    so it is never the first position past the uniform."""
    cdf = probs.cumsum_(dim=-1)  # in place: `probs` is the caller's scratch
    u = torch.cat([torch.rand(1, generator=g) for g in generators])[:, None] * cdf[:, -1:]
    picked = torch.searchsorted(cdf, u, right=True).squeeze(1).tolist()
    # u * total can round up to the total itself: the last position where the sum still rose then
    return [t if t < cdf.shape[-1] else _last_rise(cdf[i]) for i, t in enumerate(picked)]


def _last_rise(cdf: torch.Tensor) -> int:
    """The last position whose own probability is not 0 (where the cumulative sum last rose)."""
    return int(torch.nonzero(cdf < cdf[-1])[-1]) + 1 if bool(cdf[0] < cdf[-1]) else 0
