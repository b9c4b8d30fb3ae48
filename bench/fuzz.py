"""Proxy fuzzing benchmark: hostile bodies against a running proxy, counted by status, with hangs and memory.

The proxy runs in a subprocess as the tests serve it (the real app and its read deadline, a
scripted engine, the real tokenizer, a SQLite store); this process sends N bodies in all, spread
evenly over the four model endpoints, drawn by the strategies of tests/protocols/fuzz_bodies.py
(valid requests with one field replaced, arbitrary JSON, bytes, hostile text, JSON nested up to
5,000 levels where it is rendered, prompts of up to --max-prompt-mb against a 4k context). It
counts answers by status, hangs (no answer within --timeout), refused requests that recorded a
call, and the proxy process's RSS before and after.

    .venv/bin/python bench/fuzz.py [--requests 10000] [--timeout 30] [--max-prompt-mb 8]

The last line is one JSON object: requests, by_status, status_5xx, hangs, calls_recorded,
recorded_beyond_answers (calls recorded minus generating 200s: 0 when no refusal recorded one),
max_depth_tried (the deepest nesting sent), oversized_prompts (prompts sent far longer than the
context), rss_before_mb, rss_after_mb, rss_growth_mb, seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.protocols.fuzz_bodies import (  # noqa: E402
    BASES,
    TOOL_CALL_REPLY,
    FuzzBody,
    scripted_proxy,
    tagged_bodies,
)


def serve(store_path: str) -> None:
    """The child: the proxy app on a free loopback port; prints `port token rollout_id`, serves until killed."""
    from clawgym.proxy.serving import ServerThread

    proxy = scripted_proxy(store_path, [TOOL_CALL_REPLY])
    server = ServerThread(proxy.app).__enter__()
    print(server.url.rsplit(":", 1)[1], proxy.rollout.token, proxy.rollout.rollout_id, flush=True)
    while True:
        time.sleep(3600)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def recorded_calls(store_path: str, rollout_id: str) -> int:
    from clawgym.store.sql import SqlStore

    store = SqlStore(f"sqlite:///{store_path}")
    try:
        return len(store.list_calls(rollout_id))
    finally:
        store.close()


def fuzz_endpoint(
    client: httpx.Client, endpoint: str, n: int, max_prompt_chars: int
) -> tuple[Counter, Counter]:
    """Sends n bodies of `endpoint`'s strategy; answers counted by status, plus "hang"; and what
    was tried: "oversized" prompts and the deepest nesting ("max_depth")."""
    counts: Counter = Counter()
    tried: Counter = Counter()

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=tagged_bodies(endpoint, max_prompt_chars))
    def send(body: FuzzBody) -> None:
        tried["oversized"] += body.oversized
        tried["max_depth"] = max(tried["max_depth"], body.depth)
        try:
            r = client.post(endpoint, content=body.data, headers={"content-type": "application/json"})
        except httpx.TimeoutException:
            counts["hang"] += 1
            return
        counts[str(r.status_code)] += 1

    send()
    return counts, tried


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000, help="bodies in all, spread over the endpoints")
    ap.add_argument(
        "--timeout", type=float, default=30.0, help="seconds without an answer that count as a hang"
    )
    ap.add_argument(
        "--max-prompt-mb", type=float, default=8.0, help="largest oversized prompt, in MB of text"
    )
    ap.add_argument("--serve", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return

    folder = Path(tempfile.mkdtemp(prefix="clawgym-bench-fuzz-"))
    store_path = str(folder / "store.db")
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", store_path], stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert child.stdout is not None
        port, token, rollout_id = child.stdout.readline().split()
        per_endpoint = max(1, args.requests // len(BASES))
        by_endpoint: dict[str, Counter] = {}
        tried: Counter = Counter()
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"x-api-key": token}, timeout=args.timeout
        ) as client:
            client.post("/v1/messages", json=BASES["/v1/messages"])  # warm: the first call builds caches
            rss_before = rss_mb(child.pid)
            calls_before = recorded_calls(store_path, rollout_id)
            started = time.monotonic()
            for endpoint in BASES:
                counts, endpoint_tried = fuzz_endpoint(
                    client, endpoint, per_endpoint, int(args.max_prompt_mb * 1_000_000)
                )
                by_endpoint[endpoint] = counts
                tried["oversized"] += endpoint_tried["oversized"]
                tried["max_depth"] = max(tried["max_depth"], endpoint_tried["max_depth"])
                print(f"fuzz: {endpoint}: {dict(counts)} tried {dict(endpoint_tried)}", file=sys.stderr)
            seconds = time.monotonic() - started
            rss_after = rss_mb(child.pid)
        recorded = recorded_calls(store_path, rollout_id) - calls_before
    finally:
        child.kill()
        child.wait()
    counts = sum(by_endpoint.values(), Counter())
    # each 200 of a generating endpoint records exactly one call, count_tokens none, a refusal none
    generated = sum(c["200"] for e, c in by_endpoint.items() if e != "/v1/messages/count_tokens")
    figures = {
        "requests": sum(counts.values()),
        "by_status": dict(sorted(counts.items())),
        "status_5xx": sum(v for k, v in counts.items() if k.isdigit() and int(k) >= 500),
        "hangs": counts["hang"],
        "calls_recorded": recorded,
        "recorded_beyond_answers": recorded - generated,  # 0: nothing recorded for a refusal
        "max_depth_tried": tried["max_depth"],
        "oversized_prompts": tried["oversized"],
        "rss_before_mb": round(rss_before, 1),
        "rss_after_mb": round(rss_after, 1),
        "rss_growth_mb": round(rss_after - rss_before, 1),
        "seconds": round(seconds, 1),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
