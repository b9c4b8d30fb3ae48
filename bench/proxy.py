"""Proxy benchmark: added latency per call vs calling the engine directly, and render cost vs history.

Part 1 (latency): R concurrent rollouts (1, then 64) each make C Claude-Code-shaped calls
(a ~20k-token system prompt + tools, a history growing by a tool call and a tool result per
call, streamed Anthropic Messages) through the real proxy running in a subprocess (uvicorn,
PostgreSQL store + Redis live state, or SQLite + in-process with --embedded), against a scripted
engine that emits a tool call at a fixed per-token delay. The same engine is then driven
directly (same outputs, same concurrency) in this process. Added latency = the proxy's
client-observed call latency minus the direct engine latency, per percentile; the proxy's own
recorded overhead (call time not waiting for the engine) is shown beside it.

Part 2 (rendering): the PromptBuilder on a growing conversation, spliced vs rendered from
scratch, per call: time and tokens newly tokenized. Spliced cost should track new tokens only.

Beside each size, the same client sends the same bodies to a bare ASGI app served with the
proxy's uvicorn settings, which parses the request, waits a fixed time and streams a tool call:
the transport floor (client, HTTP, uvicorn; `floor_p50_ms` etc.), the part of the added latency no
proxy work can remove.

Part 1 also reports the proxy server's CPU per call (its process's user + system time over the
run, divided by calls), its server-side latency, and the mean of each step of a call from its
`clawgym_proxy_stage_seconds` metric (identity, read_body, json, validate, chain_keys, turn_fetch,
render = waiting for and running the render thread, build_* = inside it, record, put_turn).
`--baseline-tree DIR` first runs each size served by another checkout with its own install (an
earlier commit: the proxy before a change, side by side with today's); `--profile` prints the
event loop's cProfile.

    .venv/bin/python bench/proxy.py [--calls 6] [--embedded] [--baseline-tree DIR] [--profile]

The last line is one JSON object of the figures.
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid

import httpx
import numpy as np

from clawgym.assemble import open_sql_store
from clawgym.inference.interface import SamplingParams
from clawgym.inference.scripted import ScriptedEngine
from clawgym.policies import load_tokenizer
from clawgym.protocols.conversation import Conversation, Message, Tool, ToolCall
from clawgym.rendering.splice import GeneratedTurn, PromptBuilder, turn_key
from clawgym.rendering.template import ChatTemplate
from clawgym.store.config import StoreConfig

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
PARAGRAPH = (
    "You are an interactive CLI agent that helps users with software engineering tasks. Use the "
    "instructions below and the tools available to you to assist the user. When you run a command, "
    "explain what it does and why. Prefer editing existing files to creating new ones. "
)
TOOL_OUTPUT = "total 48\ndrwxr-xr-x 5 user user 4096 Nov 29 src\n-rw-r--r-- 1 user user 1234 README.md\n" * 12


def claude_code_shape(tok, system_tokens: int):
    """A ~system_tokens system prompt (tiny-qwen3 tokens) and 16 tools with JSON schemas."""
    per = len(tok.encode(PARAGRAPH, add_special_tokens=False))
    system = PARAGRAPH * max(1, system_tokens // per)
    tools = [
        {
            "name": f"Tool{i}",
            "description": f"Tool number {i}: does one thing well. " * 6,
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "what to run"},
                    "timeout": {"type": "number"},
                },
                "required": ["command"],
            },
        }
        for i in range(16)
    ]
    return system, tools


def call_text(i: int) -> str:
    return f'<tool_call>\n{{"name": "Tool{i % 16}", "arguments": {{"command": "ls -la src/module_{i}"}}}}\n</tool_call>'


def make_engine(tok, out_calls: int, delay: float) -> ScriptedEngine:
    return ScriptedEngine.from_texts(
        tok, [call_text(i) for i in range(out_calls)], max_context=65536, token_delay_s=delay
    )


# --- serve mode: the proxy in its own process ---


def serve(a) -> None:
    import uvicorn

    from clawgym.assemble import open_sql_store
    from clawgym.proxy.app import create_app
    from clawgym.proxy.config import ProxyConfig
    from clawgym.proxy.serving import uvicorn_config
    from clawgym.store.config import StoreConfig

    tok = load_tokenizer("tiny-qwen3")
    engine = make_engine(tok, 64, a.token_delay)
    cfg = ProxyConfig(redis_url=a.redis, redis_prefix=a.prefix)
    app = create_app(cfg, engine, open_sql_store(StoreConfig(url=a.store)), tok, supports_tools=True)
    # served exactly as `clawgym serve proxy` serves it (h11 with the read deadline, keep-alive 75 s)
    config = uvicorn_config(app, cfg, port=a.port, log_level="warning")
    if not a.profile:
        uvicorn.Server(config).run()
        return
    import cProfile
    import pstats
    import signal

    # uvicorn re-raises the SIGTERM it caught once it has shut down: a no-op handler lets us print
    signal.signal(signal.SIGTERM, lambda *_: None)

    # the event loop's thread only (cProfile is per thread): what blocks it is what this shows
    prof = cProfile.Profile()
    prof.enable()
    uvicorn.Server(config).run()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


FLOOR_ENGINE_S = 0.05  # the floor app's stand-in for generation, subtracted from its latencies


async def floor_app(scope, receive, send) -> None:
    """A bare ASGI app under the proxy's own uvicorn settings: reads and parses the request, waits
    FLOOR_ENGINE_S, streams a tool call's SSE events in one write. What the client, HTTP and
    uvicorn cost with no proxy work at all: the floor under the proxy's added latency."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/healthz":  # what `wait_ready` polls
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    json.loads(body)
    await asyncio.sleep(FLOOR_ENGINE_S)
    block = {"type": "tool_use", "id": uuid.uuid4().hex, "name": "Bash", "input": {}}
    events = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": json.dumps({"command": "ls -la src"})}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ]  # fmt: skip
    frames = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    )
    await send({"type": "http.response.body", "body": frames, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def serve_floor(a) -> None:
    import uvicorn

    from clawgym.proxy.config import ProxyConfig
    from clawgym.proxy.serving import uvicorn_config

    uvicorn.Server(uvicorn_config(floor_app, ProxyConfig(), port=a.port, log_level="warning")).run()


def floor_run(system, tools, concurrency: int, calls: int) -> dict:
    """The proxy bench's client and bodies against `floor_app`: added latency with no proxy work."""
    port = 18000 + (uuid.uuid4().int % 2000)
    proc = subprocess.Popen([sys.executable, __file__, "--serve-floor", "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        lat = client_latencies(url, ["floor"] * concurrency, system, tools, calls)
        return percentiles([t - FLOOR_ENGINE_S for t in lat])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- part 1: latency ---


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far, all its threads (Linux /proc)."""
    import os
    from pathlib import Path

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stage_means(metrics_text: str) -> dict[str, float]:
    """Mean milliseconds per call of each `clawgym_proxy_stage_seconds` stage, from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    sums, counts = {}, {}
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name != "clawgym_proxy_stage_seconds":
            continue
        for s in fam.samples:
            if s.name.endswith("_sum"):
                sums[s.labels["stage"]] = s.value
            elif s.name.endswith("_count"):
                counts[s.labels["stage"]] = s.value
    return {k: 1000 * sums[k] / counts[k] for k in sorted(sums) if counts.get(k)}


def baseline_commit(tree: str) -> str:
    """The commit a baseline checkout is at (short hash)."""
    out = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def percentiles(xs):
    return {"p50": float(np.percentile(xs, 50)) * 1000, "p99": float(np.percentile(xs, 99)) * 1000}


def wait_ready(url: str) -> None:
    """Polls `url`/healthz until the server answers (a minute at most)."""
    for _ in range(240):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.25)


def client_latencies(url: str, tokens: list[str], system, tools, calls: int) -> list[float]:
    """One Claude-Code-shaped rollout per token through `url`, all at once: every call's latency."""

    async def run() -> list[float]:
        lat: list[float] = []
        limits = httpx.Limits(max_connections=len(tokens) + 4)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            await asyncio.gather(
                *(rollout_via_proxy(client, url, t, system, tools, calls, lat) for t in tokens)
            )
        return lat

    return asyncio.run(run())


async def rollout_via_proxy(client, url, token, system, tools, calls, lat):
    messages = [{"role": "user", "content": "Explore the repository and fix the failing test."}]
    for _ in range(calls):
        body = {"model": "policy", "max_tokens": 128000, "stream": True, "system": [{"type": "text", "text": system}],
                "tools": tools, "messages": messages}  # fmt: skip
        t0 = time.perf_counter()
        content, current = [], None
        async with client.stream(
            "POST", f"{url}/v1/messages?beta=true", json=body, headers={"x-api-key": token}
        ) as r:
            assert r.status_code == 200, await r.aread()
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                ev = json.loads(line[6:])
                if ev["type"] == "content_block_start":
                    current = dict(ev["content_block"])
                elif ev["type"] == "content_block_delta" and ev["delta"]["type"] == "input_json_delta":
                    current["input"] = json.loads(ev["delta"]["partial_json"])
                elif ev["type"] == "content_block_delta" and ev["delta"]["type"] == "text_delta":
                    current["text"] += ev["delta"]["text"]
                elif ev["type"] == "content_block_stop":
                    content.append(current)
        lat.append(time.perf_counter() - t0)
        use = next(b for b in content if b["type"] == "tool_use")
        messages += [
            {"role": "assistant", "content": content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": TOOL_OUTPUT}],
            },
        ]


async def rollout_direct(engine, prompt_len, calls, lat):
    for i in range(calls):
        t0 = time.perf_counter()
        params = SamplingParams(max_new_tokens=4096, stop_token_ids=(4098,))
        async for _ in engine.generate([1] * (prompt_len + 300 * i), params):
            pass
        lat.append(time.perf_counter() - t0)


def latency_run(a, tok, system, tools, concurrency: int, tree: str = "") -> dict:
    """One size through the proxy; `tree`: served by that checkout's own install (`tree/.venv`,
    `tree/bench/proxy.py --serve`)."""
    from clawgym.records import RolloutSpec

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    store_url, redis_url = f"sqlite:////tmp/{schema}.db", ""
    admin = None
    if not a.embedded:
        from sqlalchemy import create_engine, text

        admin = create_engine(PG_ADMIN)
        with admin.begin() as c:
            c.execute(text(f'CREATE SCHEMA "{schema}"'))
        store_url, redis_url = f"{PG_ADMIN}?options=-csearch_path%3D{schema}", REDIS
    store = open_sql_store(StoreConfig(url=store_url))
    run = store.create_run("bench")
    regs = store.register_rollouts(
        run.id, [RolloutSpec(group_id="g", task_id="t", harness="claude-code")] * concurrency
    )
    port = 18000 + (uuid.uuid4().int % 2000)
    serve_args = ["--port", str(port), "--store", store_url, "--redis", redis_url, "--prefix", schema]
    python, script = (
        (f"{tree}/.venv/bin/python", f"{tree}/bench/proxy.py") if tree else (sys.executable, __file__)
    )
    proc = subprocess.Popen(
        [python, script, "--serve", *serve_args, "--token-delay", str(a.token_delay)]
        + (["--profile"] if a.profile else [])
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        cpu0 = cpu_seconds(proc.pid)
        proxy_lat = client_latencies(url, [r.token for r in regs], system, tools, a.calls)
        cpu_ms_per_call = 1000 * (cpu_seconds(proc.pid) - cpu0) / len(proxy_lat)
        stages = stage_means(httpx.get(f"{url}/metrics", timeout=10).text)
        calls = [c for r in regs for c in store.list_calls(r.rollout_id)]
        server_overhead = [c.response["_clawgym"]["overhead_s"] for c in calls]
        server_latency = [c.latency_s for c in calls]  # handler start → record built (recording excluded)
        engine_wait_ms = 1000 * statistics.mean(c.response["_clawgym"]["engine_wait_s"] for c in calls)
        extended = sum(c.response["_clawgym"]["prefix_extended"] for c in calls) / len(calls)
        prompt_len = int(statistics.median(len(c.prompt_ids) for c in calls if c.seq == 0))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        store.close()
        if admin is not None:
            with admin.begin() as c:
                c.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))

    engine = make_engine(tok, 64, a.token_delay)

    async def direct_side():
        lat: list[float] = []
        await asyncio.gather(*(rollout_direct(engine, prompt_len, a.calls, lat) for _ in range(concurrency)))
        return lat

    direct_lat = asyncio.run(direct_side())
    p, d, s = percentiles(proxy_lat), percentiles(direct_lat), percentiles(server_overhead)
    sl = percentiles(server_latency)
    return {
        "concurrency": concurrency,
        "calls": len(proxy_lat),
        "prompt_tokens_first_call": prompt_len,
        "proxy_p50_ms": p["p50"],
        "proxy_p99_ms": p["p99"],
        "direct_p50_ms": d["p50"],
        "direct_p99_ms": d["p99"],
        "added_p50_ms": p["p50"] - d["p50"],
        "added_p99_ms": p["p99"] - d["p99"],
        "server_overhead_p50_ms": s["p50"],
        "server_overhead_p99_ms": s["p99"],
        "prefix_extension_rate": extended,
        "server_cpu_ms_per_call": cpu_ms_per_call,
        "server_latency_p50_ms": sl["p50"],
        "server_latency_p99_ms": sl["p99"],
        "engine_wait_ms_mean": engine_wait_ms,
        "stage_ms_mean": stages,
    }


# --- part 2: rendering cost vs history ---


def render_run(tok, system_text, tools_json, turns_n: int) -> dict:
    builder = PromptBuilder(ChatTemplate(tok, supports_tools=True, run_cache=0))  # what tokenizing costs
    tools = tuple(Tool(t["name"], t["description"], t["input_schema"]) for t in tools_json)
    messages = [Message("system", system_text), Message("user", "Fix the failing test.")]
    cache: dict = {}
    rows = []
    end = tok.convert_tokens_to_ids("<|im_end|>")
    for i in range(turns_n):
        conv = Conversation(tuple(messages), tools)
        t0 = time.perf_counter()
        built = builder.build(conv, cache)
        spliced_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        full = builder.build(conv, {})
        full_s = time.perf_counter() - t0
        # the scripted turns re-render to their own tokens, so splicing must change nothing here
        assert np.array_equal(built.array, full.array), (
            f"turn {i}: the spliced prompt differs from the full rendering"
        )
        out = [*tok.encode(call_text(i), add_special_tokens=False), end]
        turn = Message(
            "assistant",
            "",
            tool_calls=(
                ToolCall(f"Tool{i % 16}", json.dumps({"command": f"ls -la src/module_{i}"}), f"c{i}"),
            ),
        )
        key = turn_key(built.prompt_key, turn)
        cache[key] = GeneratedTurn(
            key, built.parent, built.array[built.segment_start :], np.asarray(out, "<i4")
        )
        rows.append((len(built), built.rendered_tokens, spliced_s, full_s))
        messages += [turn, Message("tool", TOOL_OUTPUT, tool_call_id=f"c{i}")]
    later = rows[1:]
    new_tok = sum(r[1] for r in later)
    return {
        "turns": turns_n,
        "prompt_tokens_last": rows[-1][0],
        "spliced_ms_first_later": later[0][2] * 1000,
        "spliced_ms_last": rows[-1][2] * 1000,
        "full_ms_first_later": later[0][3] * 1000,
        "full_ms_last": rows[-1][3] * 1000,
        "new_tokens_per_call": new_tok / len(later),
        "render_ms_per_new_ktok": sum(r[2] for r in later) * 1000 / (new_tok / 1000),
        "full_render_ms_per_prompt_ktok": sum(r[3] for r in later) * 1000 / (sum(r[0] for r in later) / 1000),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--store", default="", help=argparse.SUPPRESS)
    ap.add_argument("--redis", default="", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", default="clawgym", help=argparse.SUPPRESS)
    ap.add_argument(
        "--profile", action="store_true", help="print the proxy's event-loop cProfile (top 25 by own time)"
    )
    ap.add_argument("--serve-floor", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--baseline-tree",
        default="",
        help="first run each size served by this checkout of an earlier commit, with its own install "
        "(e.g. `git worktree add ../base <commit> && ../base/install.sh`): old then new, side by side",
    )
    ap.add_argument("--calls", type=int, default=6, help="calls per rollout")
    ap.add_argument("--system-tokens", type=int, default=20000, help="system prompt size")
    ap.add_argument("--token-delay", type=float, default=0.002, help="scripted engine seconds per token")
    ap.add_argument("--turns", type=int, default=40, help="history length of the rendering run")
    ap.add_argument(
        "--embedded", action="store_true", help="SQLite + in-process state instead of PostgreSQL + Redis"
    )
    ap.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 64], help="rollouts in parallel, per run"
    )
    a = ap.parse_args()
    if a.serve:
        serve(a)
        return
    if a.serve_floor:
        serve_floor(a)
        return
    tok = load_tokenizer("tiny-qwen3")
    system, tools = claude_code_shape(tok, a.system_tokens)
    render = render_run(tok, system, tools, a.turns)
    print(f"rendering over {a.turns} turns (prompt grows to {render['prompt_tokens_last']} tokens):")
    print(f"  spliced: {render['spliced_ms_first_later']:.2f} ms at turn 2, {render['spliced_ms_last']:.2f} ms at turn {a.turns}"
          f"  ({render['new_tokens_per_call']:.0f} new tokens per call, {render['render_ms_per_new_ktok']:.2f} ms per new 1k tokens)")  # fmt: skip
    print(f"  from scratch: {render['full_ms_first_later']:.1f} ms at turn 2, {render['full_ms_last']:.1f} ms at turn {a.turns}"
          f"  ({render['full_render_ms_per_prompt_ktok']:.2f} ms per prompt 1k tokens)")  # fmt: skip
    runs, old_runs = {}, {}
    for conc in a.concurrency:
        if a.baseline_tree:
            r = old_runs[conc] = latency_run(a, tok, system, tools, conc, tree=a.baseline_tree)
            print(f"[baseline: the proxy of {a.baseline_tree}] {conc} rollouts: added p50 {r['added_p50_ms']:.1f} / "
                  f"p99 {r['added_p99_ms']:.1f} ms, proxy-measured overhead p50 {r['server_overhead_p50_ms']:.1f} / "
                  f"p99 {r['server_overhead_p99_ms']:.1f} ms, server-side latency p50 {r['server_latency_p50_ms']:.1f} / "
                  f"p99 {r['server_latency_p99_ms']:.1f} ms, server CPU {r['server_cpu_ms_per_call']:.1f} ms per call; "
                  f"stage means (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in r["stage_ms_mean"].items()))  # fmt: skip
        r = latency_run(a, tok, system, tools, conc)
        r["floor"] = floor_run(system, tools, conc, a.calls)
        runs[conc] = r
        print(f"{conc:>2} concurrent rollouts × {a.calls} calls ({r['prompt_tokens_first_call']} prompt tokens at call 1): "
              f"proxy p50 {r['proxy_p50_ms']:.1f} / p99 {r['proxy_p99_ms']:.1f} ms, direct engine p50 {r['direct_p50_ms']:.1f}"
              f" / p99 {r['direct_p99_ms']:.1f} ms → added p50 {r['added_p50_ms']:.1f} / p99 {r['added_p99_ms']:.1f} ms; "
              f"proxy-measured overhead p50 {r['server_overhead_p50_ms']:.1f} / p99 {r['server_overhead_p99_ms']:.1f} ms; "
              f"prefix-extension rate {r['prefix_extension_rate']:.2f}")  # fmt: skip
        print(f"   transport floor (the same client and bodies against a bare ASGI app under the proxy's uvicorn "
              f"settings): added p50 {r['floor']['p50']:.1f} / p99 {r['floor']['p99']:.1f} ms")  # fmt: skip
        print(f"   server-side latency (handler start to record, recording excluded) p50 {r['server_latency_p50_ms']:.1f}"
              f" / p99 {r['server_latency_p99_ms']:.1f} ms; proxy server CPU {r['server_cpu_ms_per_call']:.1f} ms per call (whole process); engine wait mean "
              f"{r['engine_wait_ms_mean']:.1f} ms; stage means (ms; build_* = inside the render thread): "
              + ", ".join(f"{k} {v:.2f}" for k, v in r["stage_ms_mean"].items()))  # fmt: skip
    hi, lo = runs[max(runs)], runs[min(runs)]
    figures = {
        "concurrency": max(runs),
        "overhead_p50_ms": round(hi["added_p50_ms"], 2),
        "overhead_p99_ms": round(hi["added_p99_ms"], 2),
        "overhead_p50_ms_1": round(lo["added_p50_ms"], 2),
        "overhead_p99_ms_1": round(lo["added_p99_ms"], 2),
        "floor_p50_ms": round(hi["floor"]["p50"], 2),
        "floor_p99_ms": round(hi["floor"]["p99"], 2),
        "floor_p50_ms_1": round(lo["floor"]["p50"], 2),
        "floor_p99_ms_1": round(lo["floor"]["p99"], 2),
        "server_overhead_p50_ms": round(hi["server_overhead_p50_ms"], 2),
        "server_overhead_p99_ms": round(hi["server_overhead_p99_ms"], 2),
        "direct_p50_ms": round(hi["direct_p50_ms"], 2),
        "server_cpu_ms_per_call": round(hi["server_cpu_ms_per_call"], 2),
        "server_latency_p50_ms": round(hi["server_latency_p50_ms"], 2),
        "server_latency_p99_ms": round(hi["server_latency_p99_ms"], 2),
        "server_cpu_ms_per_call_1": round(lo["server_cpu_ms_per_call"], 2),
        "server_latency_p50_ms_1": round(lo["server_latency_p50_ms"], 2),
        "server_latency_p99_ms_1": round(lo["server_latency_p99_ms"], 2),
        "stage_ms_mean": {k: round(v, 3) for k, v in hi["stage_ms_mean"].items()},
        "prefix_extension_rate": hi["prefix_extension_rate"],
        "render_ms_per_new_ktok": round(render["render_ms_per_new_ktok"], 3),
        "full_render_ms_per_prompt_ktok": round(render["full_render_ms_per_prompt_ktok"], 3),
        "spliced_render_ms_last": round(render["spliced_ms_last"], 3),
        "full_render_ms_last": round(render["full_ms_last"], 2),
        "store": "sqlite+memory" if a.embedded else "postgresql+redis",
    }
    if old_runs:
        oh, ol = old_runs[max(old_runs)], old_runs[min(old_runs)]
        figures.update(
            old_path=f"{a.baseline_tree} at {baseline_commit(a.baseline_tree)}",
            old_overhead_p50_ms_1=round(ol["added_p50_ms"], 2),
            old_overhead_p99_ms_1=round(ol["added_p99_ms"], 2),
            old_server_cpu_ms_per_call_1=round(ol["server_cpu_ms_per_call"], 2),
            old_server_latency_p50_ms_1=round(ol["server_latency_p50_ms"], 2),
            old_server_latency_p99_ms_1=round(ol["server_latency_p99_ms"], 2),
            old_overhead_p50_ms=round(oh["added_p50_ms"], 2),
            old_overhead_p99_ms=round(oh["added_p99_ms"], 2),
            old_server_overhead_p50_ms=round(oh["server_overhead_p50_ms"], 2),
            old_server_overhead_p99_ms=round(oh["server_overhead_p99_ms"], 2),
            old_server_cpu_ms_per_call=round(oh["server_cpu_ms_per_call"], 2),
            old_server_latency_p50_ms=round(oh["server_latency_p50_ms"], 2),
            old_server_latency_p99_ms=round(oh["server_latency_p99_ms"], 2),
            old_stage_ms_mean={k: round(v, 3) for k, v in oh["stage_ms_mean"].items()},
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
