"""The torch engine's sampler draws from the tempered (and truncated) distribution it reports.

Statistical checks with fixed seeds: 40,000 draws over a 6-token vocabulary, each token's frequency
within 5 standard errors of its probability, so a wrong temperature, a skipped truncation or a
token drawn off by one fails while sampling noise never does.
"""

import math

import torch

from clawgym.inference.interface import SamplingParams
from clawgym.inference.sampler import _last_rise, make_generator, sample_rows

LOGITS = torch.tensor([2.0, 0.5, -1.0, 1.5, 0.0, -3.0])
ROWS, ROUNDS = 400, 100  # 40,000 draws, each row with its own generator


def _frequencies(params: SamplingParams) -> tuple[torch.Tensor, list[float], list[int]]:
    generators = [make_generator(seed) for seed in range(ROWS)]
    counts = torch.zeros(len(LOGITS))
    logprobs, tokens = [], []
    for _ in range(ROUNDS):
        sampled = sample_rows(LOGITS.repeat(ROWS, 1), [params] * ROWS, generators)
        assert not sampled.failed, f"finite rows failed: {sampled.failed}"
        counts += torch.bincount(torch.tensor(sampled.tokens), minlength=len(LOGITS))
        logprobs += sampled.logprobs
        tokens += sampled.tokens
    return counts / (ROWS * ROUNDS), logprobs, tokens


def _assert_close(freq: torch.Tensor, probs: torch.Tensor) -> None:
    n = ROWS * ROUNDS
    for token, (f, p) in enumerate(zip(freq.tolist(), probs.tolist(), strict=True)):
        sigma = math.sqrt(max(p * (1 - p), 1e-12) / n)
        assert abs(f - p) <= 5 * sigma + 1e-9, f"token {token}: drawn {f:.4f} of the time, probability {p:.4f}"


def test_draws_follow_the_tempered_distribution_and_report_its_logprobs():
    freq, logprobs, tokens = _frequencies(SamplingParams(max_new_tokens=1, temperature=0.7))
    expected = torch.log_softmax(LOGITS / 0.7, dim=-1)
    _assert_close(freq, expected.exp())
    worst = max(abs(lp - expected[t].item()) for lp, t in zip(logprobs, tokens, strict=True))
    assert worst < 1e-6, f"a reported logprob differs from log_softmax(logits / T) by {worst}"


def test_truncated_rows_draw_only_their_support_renormalised():
    freq, logprobs, tokens = _frequencies(SamplingParams(max_new_tokens=1, temperature=1.0, top_k=3))
    probs = torch.softmax(LOGITS, dim=-1)
    kept = torch.zeros_like(probs)
    kept[[0, 3, 1]] = probs[[0, 3, 1]]
    _assert_close(freq, kept / kept.sum())
    # the reported logprob is the untruncated one (the trainer recomputes log_softmax(logits / T))
    expected = torch.log_softmax(LOGITS, dim=-1)
    assert all(abs(lp - expected[t].item()) < 1e-6 for lp, t in zip(logprobs, tokens, strict=True))


def test_greedy_and_sampled_rows_share_a_batch_and_bad_rows_fail_alone():
    logits = LOGITS.repeat(4, 1)
    logits[2, 4] = float("nan")
    params = [
        SamplingParams(max_new_tokens=1, temperature=0.0),
        SamplingParams(max_new_tokens=1, temperature=0.7),
        SamplingParams(max_new_tokens=1, temperature=0.7),
        SamplingParams(max_new_tokens=1, temperature=0.0, top_k=2),
    ]
    sampled = sample_rows(logits, params, [make_generator(i) for i in range(4)])
    assert sampled.failed == [2] and sampled.tokens[2] == -1 and math.isnan(sampled.logprobs[2])
    assert sampled.tokens[0] == sampled.tokens[3] == 0, "greedy rows take the argmax"
    assert abs(sampled.logprobs[0] - torch.log_softmax(LOGITS, dim=-1)[0].item()) < 1e-6, (
        "greedy reports the T = 1 logprob"
    )
    assert 0 <= sampled.tokens[1] < len(LOGITS) and math.isfinite(sampled.logprobs[1])


def test_a_uniform_that_rounds_up_to_the_total_takes_the_last_token_of_any_mass():
    assert _last_rise(torch.tensor([0.0, 0.2, 0.7, 0.7, 0.7])) == 2
    assert _last_rise(torch.tensor([0.3, 0.3, 0.3])) == 0
    assert _last_rise(torch.tensor([0.1, 0.4, 1.0])) == 2
