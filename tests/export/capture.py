"""A real captured run for the exporter and browser tests: one GRPO group of two rollouts sent through
the real proxy app (uvicorn on a loopback port, the tiny-qwen3 tokenizer) into a real store, then
finished with rewards. The engine is a scripted one by default (exact, known replies), or any
engine given, such as the real torch engine on tiny-qwen3.

Rollout 0 is a two-call agent loop (a tool call, its result, a final answer): one line with growing
history. Rollout 1 makes one call at T 0.7, then a "compacted" second call at T 1.0 whose history
was rewritten: a branch, whatever the policy said. The first user message carries an HTML
injection (`HOSTILE`), which the browser must show as text. Rollout 1 did not pass: it ends with a
verifier output and a harness stderr (`VERIFIER_OUTPUT`, `HARNESS_STDERR`, the injection in both).
"""

from dataclasses import dataclass

import httpx

from clawgym.evaluation.runner import eval_run
from clawgym.inference.interface import Engine
from clawgym.inference.scripted import ScriptedEngine
from clawgym.policies import load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.records import RolloutSpec
from clawgym.store.interface import TrajectoryStore

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'
TASK = f"Fix the bug in a.py {HOSTILE}"
TOOL = {"name": "read_file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
TOOL_CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
REPLIES = [TOOL_CALL, "Fixed: a.py now returns 2.", "Let me look.", "Summary: the bug is in a.py."]
VERIFIER_OUTPUT = f"0/1 tests passed\nFAILED tests/test_a.py::test_f - assert 1 == 2 {HOSTILE}"
HARNESS_STDERR = f"Traceback (most recent call last):\n  ...\nRuntimeError: gave up {HOSTILE}"


@dataclass(frozen=True)
class CapturedRun:
    run_id: str
    group_id: str
    rollout_ids: list[str]  # [the agent loop (reward 1), the compacted one (reward 0)]


def _post(url: str, token: str, messages: list[dict], temperature: float) -> dict:
    body = {"model": "policy", "max_tokens": 64, "temperature": temperature, "tools": [TOOL], "messages": messages}
    headers = {"x-api-key": token, "anthropic-version": "2023-06-01"}
    reply = httpx.post(f"{url}/v1/messages", json=body, headers=headers, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _follow_up(first: dict) -> list[dict] | None:
    """What a harness sends after `first`: the tool's result, or a nudge after text; None after an empty turn."""
    tool_use = next((b for b in first["content"] if b["type"] == "tool_use"), None)
    if tool_use is not None:
        return [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "def f(): return 1"}]
    return [{"type": "text", "text": "Continue."}] if first["content"] else None


def capture_run(
    store: TrajectoryStore, engine: Engine | None = None, run_config: dict | None = None
) -> CapturedRun:
    """Captures the run described above into `store` through the real proxy; returns its ids.
    `run_config`: the run's config (default {"kind": "test"}; a trainer's config makes it a training run)."""
    tok = load_tokenizer("tiny-qwen3")
    engine = engine or ScriptedEngine.from_texts(tok, REPLIES, max_context=4096, model="tiny-qwen3")
    config = ProxyConfig()
    run = store.create_run("captured", run_config or {"kind": "test"})
    group = f"g-{run.id[:8]}"
    registered = store.register_rollouts(run.id, [RolloutSpec(group, "fix-a", "test-harness", 0)] * 2)
    loop, compacted = (r.token for r in registered)
    with ServerThread(create_app(config, engine, store, tok), config) as server:
        user = {"role": "user", "content": TASK}
        first = _post(server.url, loop, [user], temperature=0.7)
        if (then := _follow_up(first)) is not None:
            _post(server.url, loop, [user, {"role": "assistant", "content": first["content"]},
                                     {"role": "user", "content": then}], temperature=0.7)  # fmt: skip
        _post(server.url, compacted, [user], temperature=0.7)
        summary = {"role": "user", "content": "Summarise the conversation so far."}
        _post(server.url, compacted, [summary], temperature=1.0)  # history rewritten: a branch
    store.finish_rollout(registered[0].rollout_id, "finished", reward=1.0, passed=True)
    store.finish_rollout(registered[1].rollout_id, "finished", reward=0.0, passed=False,
                         verifier_output=VERIFIER_OUTPUT, harness_stderr=HARNESS_STDERR)  # fmt: skip
    return CapturedRun(run.id, group, [r.rollout_id for r in registered])


def record_evaluations(store: TrajectoryStore, run_id: str) -> tuple[str, str]:
    """Two evaluations of the run, recorded as the evaluation runner records them: the run's own of v0
    (rows on the run, naming their eval run) and a later `clawgym eval` of v1 (rows on the eval run
    itself); plus an eval run of nothing recorded here. Returns the two evaluations' run ids."""
    own = eval_run(store, "captured", {"suite": "mini", "of_run": run_id, "version": 0})
    store.record_eval(run_id, 0, "mini", "reference", {"pass@1": 0.25, "eval_run": own})
    later = eval_run(store, "captured", {"suite": "mini", "of_run": run_id, "version": 1})
    store.record_eval(later, 1, "mini", "reference", {"pass@1": 0.75})
    eval_run(store, "other", {"suite": "mini"})  # evaluates nothing recorded here: listed on its own
    return own, later
