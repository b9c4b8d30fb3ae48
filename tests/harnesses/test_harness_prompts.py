"""bench/harness_prompts.py on the two cheap harnesses: the real reference agent and the real
mini-swe-agent CLI (installed from PyPI), each through the real proxy rendering in SmolLM2's
tokenizer, their first call's prompt measured from the store and split into system, tools, rest."""

from __future__ import annotations

import pytest

from bench.harness_prompts import measure
from clawgym.policies import SMOLLM2_135M


@pytest.mark.harness
@pytest.mark.slow
def test_reference_and_mini_swe_agent_first_prompts_fit_smollm2s_context():
    report = measure(["reference", "mini-swe-agent"], SMOLLM2_135M, reply_tokens=40, timeout_s=300)
    assert report["policy"] == SMOLLM2_135M and report["context"] == 8192, report
    for name in ("reference", "mini-swe-agent"):
        r = report["harnesses"][name]
        assert "error" not in r, f"{name}: {r}"
        assert r["prompt_tokens"] > r["system_tokens"] > 0, f"{name}: the system prompt is part of it: {r}"
        assert r["rendered_tokens"] == r["prompt_tokens"], f"{name}: a first call is rendered from scratch"
        assert r["system_tokens"] + r["tools_tokens"] + r["other_tokens"] == r["prompt_tokens"], (
            f"{name}: the split adds up: {r}"
        )
        assert r["context_needed"] == r["prompt_tokens"] + 40, r
        assert r["calls"] >= 1 and r["protocol"] == "openai_chat", r
    mini, reference = report["harnesses"]["mini-swe-agent"], report["harnesses"]["reference"]
    assert mini["tools"] == 1 and mini["tools_tokens"] > 0, f"mini-swe-agent sends its bash tool: {mini}"
    assert reference["tools"] == 0 and reference["tools_tokens"] == 0, f"text mode, no tools: {reference}"
    assert mini["fits"] and mini["context_needed"] <= report["context"], (
        f"mini-swe-agent's first call fits smollm2's context: {mini}"
    )
    assert set(report["fit"]) == {"reference", "mini-swe-agent"} and not report["failed"], report
