"""A judged file is read by its ends: a 200 MiB file a rubric rule names costs the judging process a
few MB, not the file, and its first and last lines still reach the prompt the judge receives.

The judging runs in a child process (a real local sandbox, the real judge endpoint of `conftest`),
so its peak RSS is its own and not the test session's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).parent / "data" / "hybrid-summary"
HEAD, TAIL = "HEAD-OF-THE-SUMMARY", "TAIL-OF-THE-SUMMARY"

CHILD = r"""
import asyncio, json, resource, sys
from clawgym.judge import evidence
from clawgym.judge.client import Judge
from clawgym.judge.config import JudgeConfig
from clawgym.sandbox import LocalSandboxConfig, SandboxConfig, SandboxSpec
from clawgym.sandbox.local import LocalBackend
from clawgym.tasks.loader import load_task

root, task_dir, base_url, key_env, head, tail = sys.argv[1:]


def peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def main() -> None:
    task = load_task(task_dir)
    backend = LocalBackend(SandboxConfig(owner="judge-memory-test", local=LocalSandboxConfig(root_dir=root)))
    sandbox = await backend.create(SandboxSpec(workdir=task.workdir))
    judge = Judge(JudgeConfig(base_url=base_url, model="judge", api_key_env=key_env, max_file_chars=2000))
    try:
        made = await sandbox.exec(
            f"mkdir -p output && printf '{head}\\n' > output/summary.md && truncate -s 200M output/summary.md"
            f" && printf '\\n{tail}\\n' >> output/summary.md && stat -c %s output/summary.md"
        )
        assert made.ok, made
        before = peak_kib()
        found = await evidence.collect(task, sandbox, "harness output", judge.cfg)
        outcome = await judge.judge(task.instruction, task.rubric, found)
        growth = peak_kib() - before
    finally:
        await judge.close()
        await sandbox.destroy()
        await backend.close()
    print(json.dumps({"size": int(made.stdout), "growth_kib": growth, "score": outcome.score, "error": outcome.error}))


asyncio.run(main())
"""


def test_a_200_mib_file_named_by_a_rule_is_judged_by_its_ends_in_bounded_memory(judge_endpoint, tmp_path):
    """The file's first and last text reach the judge; the judging process grows by < 50 MB."""
    endpoint = judge_endpoint(['{"scores": {"Summary usefulness": 0.25}, "reason": "mostly empty"}'])
    root = tempfile.mkdtemp(prefix="clawgym-judge-mem-")
    os.chmod(root, 0o711)  # traversable by the sandbox's uid, like the default root
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                root,
                str(FIXTURE),
                endpoint.base_url,
                endpoint.key_env,
                HEAD,
                TAIL,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ},
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["size"] > 200 << 20, "the agent's file really is 200 MiB"
    assert result["score"] == 0.25, result["error"]
    assert result["growth_kib"] < 50 * 1024, f"judging grew the process by {result['growth_kib']} KiB"

    [[_, user]] = endpoint.prompts()
    assert HEAD in user["content"] and TAIL in user["content"], "the file's head and tail reach the judge"
    assert f"[... the middle of this {result['size']}-byte file left out ...]" in user["content"]
