"""Incremental detokenization with the real tiny-qwen3 tokenizer (byte-level BPE)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawgym.policies import load_tokenizer
from clawgym.rendering.detokenize import REPLACEMENT, IncrementalDetokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-qwen3")


class SlowTokenizer:
    """`tok` without its Rust backend: the window decoder then decodes through transformers."""

    def __init__(self, tok) -> None:
        self.decode = tok.decode


def stream(tok, text):
    d = IncrementalDetokenizer(tok)
    ids = tok.encode(text, add_special_tokens=False)
    pieces = [d.push(t) for t in ids] + [d.flush()]
    return ids, pieces


def test_multibyte_characters_are_never_split(tok):
    ids, pieces = stream(tok, "héllo 日本語 🙂 <tool_call>")
    assert "".join(pieces) == tok.decode(ids), "pieces concatenate to the full decode"
    assert not any(REPLACEMENT in p for p in pieces), f"no piece may carry half a character: {pieces}"
    assert len([p for p in pieces if p]) > 3, "text is released as it completes, not at the end"


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=60))
def test_any_text_streams_back_exactly(tok, text):
    ids, pieces = stream(tok, text)
    assert "".join(pieces) == tok.decode(ids, skip_special_tokens=False), "streamed text equals the decode"
    if REPLACEMENT not in text:
        assert not any(REPLACEMENT in p for p in pieces), f"a character was split: {pieces}"


def test_the_rust_backend_decodes_as_transformers_does(tok):
    """The window decoder (the backend tokenizer) gives transformers' decode for any ids, special
    and added tokens included."""
    import random

    from clawgym.rendering.detokenize import window_decoder

    fast, slow = window_decoder(tok), window_decoder(SlowTokenizer(tok))
    rng = random.Random(0)
    for _ in range(2000):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randrange(0, 6))]
        assert fast(ids) == slow(ids), ids


@settings(max_examples=50, deadline=None)
@given(text=st.text(max_size=60))
def test_both_decoders_stream_the_same_pieces(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    pieces = {}
    for fast in (True, False):
        d = IncrementalDetokenizer(tok if fast else SlowTokenizer(tok))
        pieces[fast] = [d.push(t) for t in ids] + [d.flush()]
    assert pieces[True] == pieces[False]
