"""Oversized prompts under attack (issue #16, item 3): refused before they are tokenized, and one
rollout's long renders never queue another rollout's call.

Real parts only: the real app served by uvicorn as `clawgym serve proxy` serves it, on a loopback
port in this process (so this process's RSS is the server's), the real tiny-qwen3 tokenizer, a
scripted engine, a real SQLite store.
"""

import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

MB = 1024 * 1024
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def rss_mib() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024


def prose(chars: int, seed: int) -> str:
    """`chars` characters of distinct text (~1.4 characters a tiny-qwen3 token: slow to tokenize)."""
    rng = random.Random(seed)
    words = [f"{rng.choice(WORDS)}{rng.randint(0, 999)}" for _ in range(chars // 6 + 1)]
    return " ".join(words)[:chars]


def anthropic(token: str, text: str) -> tuple[str, dict, dict]:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": text}]}
    return "/v1/messages", body, {"x-api-key": token}


def test_three_oversized_prompts_are_refused_as_too_long_without_growing_the_proxy(proxy_factory):
    """Reproduces: three 8 MB prompts were each tokenized before the context check, answered 400
    "too long" and left the proxy 2 GB bigger (their ids kept in the 64-entry run cache). Three
    distinct 2 MB prompts against an 8k context are now refused by their length in characters
    before any tokenizing, in the Anthropic error shape, and nothing is recorded; the server's
    RSS grows by less than 40 MiB (before: ~45 MiB a prompt kept tokenized, plus the tokenizer's)."""
    p = proxy_factory(max_context=8192)
    path, body, headers = anthropic(p.token, "warm up")
    assert httpx.post(p.url + path, json=body, headers=headers, timeout=60).status_code == 200
    before = rss_mib()
    for seed in range(3):
        path, body, headers = anthropic(p.token, prose(2 * MB, seed))
        started = time.monotonic()
        r = httpx.post(p.url + path, json=body, headers=headers, timeout=120)
        assert r.status_code == 400, r.text[:300]
        error = r.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
        assert error["error"]["message"].startswith("prompt is too long"), error
        print(f"refused in {time.monotonic() - started:.2f} s")
    grown = rss_mib() - before
    assert grown < 40, f"three refused prompts grew the proxy by {grown:.0f} MiB"
    assert len(p.calls()) == 1, "nothing is recorded for a refused prompt"


def test_the_character_bound_never_refuses_a_prompt_that_fits(proxy_factory):
    """The bound is the vocabulary's longest entry (39 characters in tiny-qwen3: a table rule that
    is one token): 8,000 such rules, 312,000 characters in ~8,000 tokens, fit an 8k context and
    are served; 8,300 (324,000 characters, more than 8,192 tokens can hold) are refused untokenized."""
    p = proxy_factory(max_context=8192)
    rule = " +-------------------+---------------+\n"
    path, body, headers = anthropic(p.token, rule * 8000)
    r = httpx.post(p.url + path, json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text[:300]
    assert 8000 <= len(p.calls()[0].prompt_ids) <= 8192
    path, body, headers = anthropic(p.token, rule * 8300)
    r = httpx.post(p.url + path, json=body, headers=headers, timeout=120)
    assert r.status_code == 400 and "characters to tokenize" in r.json()["error"]["message"], r.text[:300]


def test_one_rollouts_long_renders_do_not_queue_another_rollouts_call(proxy_factory):
    """Reproduces: one rollout keeping four 4 MB prompts in flight held every render thread, and
    another rollout's calls waited behind them (median 5 ms → 591 ms). With two render threads
    and one render at a time per rollout, rollout A sends four long prompts at once (each fits the
    context, each holds a render thread for ~1 s); rollout B's short call, sent half a second
    later, completes before at least three of A's, where it used to queue behind all four."""
    p = proxy_factory(max_context=4_000_000, rollouts=2, render_threads=2, render_per_rollout=1)
    a, b = p.tokens
    done: dict[str, float] = {}

    def send(name: str, token: str, text: str) -> int:
        path, body, headers = anthropic(token, text)
        r = httpx.post(p.url + path, json=body, headers=headers, timeout=300)
        done[name] = time.monotonic()
        return r.status_code

    longs = [prose(800_000, seed=10 + i) for i in range(4)]
    with ThreadPoolExecutor(8) as pool:
        sent = [pool.submit(send, f"a{i}", a, text) for i, text in enumerate(longs)]
        time.sleep(0.5)  # A's bodies are read and their renders under way or waiting
        short = pool.submit(send, "b", b, "hello")
        assert short.result() == 200
        assert [f.result() for f in sent] == [200] * 4
    pending = sum(1 for i in range(4) if done[f"a{i}"] > done["b"])
    assert pending >= 3, f"B's call completed after {4 - pending} of A's 4 long calls: it queued behind them"
