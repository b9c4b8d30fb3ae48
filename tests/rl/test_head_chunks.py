"""The LM head in chunks with recomputation (`logprobs_and_entropy(chunk_rows=k)`) and the whole head
kept (`chunk_rows=None`) are the definition written out row by row: the same logprobs and entropies,
in the rows' order, and the same gradients to the hidden states and the head's weights, whether or
not the entropy carries one.

Rows are built to cross chunk boundaries the hard ways: several rows read one context slot (a tree
branches there), one slot at two temperatures (two keys), rows given out of key order."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from clawgym.rl.forward import logprobs_and_entropy

VOCAB = 40


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=False,
    )  # fmt: skip
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float64)


def _rows(n_slots: int = 30, n_rows: int = 70) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    context = torch.randint(0, n_slots, (n_rows,), generator=g)  # slots repeat: branches
    targets = torch.randint(0, VOCAB, (n_rows,), generator=g)
    temperature = torch.where(torch.rand(n_rows, generator=g) < 0.3, 0.7, 1.0).double()
    return context, targets, temperature


def _by_definition(model, hidden, context, targets, temperature, entropy_grad):
    """softmax(head(h[context]) / T) for every row on its own: no dedup, no chunks."""
    logp = torch.log_softmax(model.get_output_embeddings()(hidden[context]) / temperature[:, None], dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp[torch.arange(len(targets)), targets], entropy if entropy_grad else entropy.detach()


def _run(model, hidden, rows, chunk_rows, entropy_grad):
    """(logprob, entropy, d/d hidden, d/d head weight) of a loss weighing every row differently."""
    model.zero_grad()
    hidden = hidden.detach().requires_grad_(True)
    if chunk_rows == "definition":
        logprob, entropy = _by_definition(model, hidden, *rows, entropy_grad)
    else:
        logprob, entropy = logprobs_and_entropy(
            model, hidden, *rows, entropy_grad=entropy_grad, chunk_rows=chunk_rows
        )
    weights = torch.linspace(-1.0, 2.0, len(logprob), dtype=logprob.dtype)  # a loss weighing each row
    loss = (weights * logprob).sum() + (0.3 * entropy.sum() if entropy_grad else 0.0)
    loss.backward()
    return logprob.detach(), entropy.detach(), hidden.grad, model.get_output_embeddings().weight.grad.clone()


@pytest.mark.parametrize("entropy_grad", [False, True])
@pytest.mark.parametrize("chunk_rows", [None, 1, 7, 16])
def test_the_head_in_chunks_gives_the_whole_heads_outputs_and_gradients(chunk_rows, entropy_grad):
    model = _model()
    hidden = torch.randn(30, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    rows = _rows()
    assert len(torch.unique(torch.stack([rows[0].double(), rows[2]], 1), dim=0)) > 16, (
        "test setup: more keys than the largest chunk, so every case crosses chunk boundaries"
    )
    whole = _run(model, hidden, rows, "definition", entropy_grad)
    chunked = _run(model, hidden, rows, chunk_rows, entropy_grad)
    for name, a, b in zip(("logprob", "entropy", "hidden grad", "head grad"), whole, chunked, strict=True):
        torch.testing.assert_close(
            b, a, rtol=1e-12, atol=1e-12, msg=f"{name} differs at chunk_rows={chunk_rows}"
        )
    assert whole[2].abs().sum() > 0 and whole[3].abs().sum() > 0, "the loss must reach both gradients"


def test_no_loss_row_gives_empty_outputs_that_still_reach_the_head():
    """A pack with no loss row (an FSDP rank's filler) must still backpropagate through the head:
    every rank's backward joins the same collectives."""
    model = _model()
    empty = torch.zeros(0, dtype=torch.long)
    hidden = torch.randn(5, 16, dtype=torch.float64, requires_grad=True)
    logprob, entropy = logprobs_and_entropy(model, hidden, empty, empty, torch.zeros(0, dtype=torch.float64))
    assert logprob.shape == (0,) and entropy.shape == (0,) and logprob.dtype == torch.float64
    logprob.sum().backward()
    assert model.get_output_embeddings().weight.grad is not None, "the backward must reach the head"
