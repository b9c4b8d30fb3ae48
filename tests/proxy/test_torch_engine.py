"""The proxy in front of the real torch engine on tiny-qwen3 (CPU): real tokens, real logprobs."""

import anthropic
import pytest

from clawgym.inference.torch_engine import TorchEngine


@pytest.mark.slow
def test_real_engine_calls_are_recorded_exactly_and_the_next_prompt_extends_them(proxy_factory, tokenizer):
    """Greedy decoding on the real policy: the response text is what the recorded ids decode to,
    logprobs are the engine's, and the follow-up prompt splices the generated ids."""
    engine = TorchEngine.from_spec("tiny-qwen3", max_batch=4)
    p = proxy_factory(engine=engine)
    client = anthropic.Anthropic(base_url=p.url, api_key=p.token, max_retries=0)
    messages = [{"role": "user", "content": "Say hello."}]
    first = client.messages.create(
        model="tiny-qwen3", max_tokens=12, messages=messages, extra_body={"temperature": 0}
    )
    (call,) = p.calls()
    assert 0 < len(call.output_ids) <= 12 and call.finish_reason in ("stop", "length"), call.finish_reason
    assert first.usage.output_tokens == len(call.output_ids), "usage counts the engine's tokens"
    assert (call.output_logprobs <= 0).all() and (call.output_versions == 0).all(), (
        "engine logprobs and version"
    )
    decoded = tokenizer.decode(call.output_ids.tolist(), skip_special_tokens=True)
    text = "".join(b.text for b in first.content if b.type == "text")
    assert text.strip() == decoded.strip(), (
        f"response text {text!r} must be the decode of the ids {decoded!r}"
    )

    if not first.content:  # an empty turn cannot be echoed back by a harness either
        pytest.skip("the random policy produced an empty turn")
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": "Again."},
    ]
    client.messages.create(model="tiny-qwen3", max_tokens=4, messages=messages, extra_body={"temperature": 0})
    calls = p.calls()
    head = calls[0].prompt_ids.tolist() + calls[0].output_ids.tolist()
    assert calls[1].prompt_ids.tolist()[: len(head)] == head, (
        "the second prompt extends prompt + generated ids"
    )
