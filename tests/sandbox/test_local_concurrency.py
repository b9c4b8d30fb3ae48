"""Many local sandboxes at once, as the orchestrator runs them: one event loop, 32 rollouts."""

import asyncio
import json
import os

import pytest

from clawgym.sandbox import SandboxSpec

VERIFIER = b"""import json, pathlib
answer = pathlib.Path('/app/answer.txt').read_text().strip()
pathlib.Path('/logs/verifier').mkdir(parents=True, exist_ok=True)
pathlib.Path('/logs/verifier/reward.json').write_text(json.dumps({'reward': float(answer == '42')}))
"""


@pytest.mark.slow
def test_32_concurrent_local_sandboxes_each_run_a_rollout_to_the_end(make_local):
    """Each: create, put task, harness-like exec, verifier, get result, destroy; none interferes."""
    backend = make_local()

    async def rollout(i: int) -> tuple[int, float, str]:
        sandbox = await backend.create(SandboxSpec(workdir="/app", mounts=["/tests", "/logs"]))
        try:
            await sandbox.put_file("/app/task.txt", f"rollout {i}\n".encode())
            await sandbox.put_file("/tests/verify.py", VERIFIER)
            answer = "42" if i % 2 == 0 else "41"
            harness = await sandbox.exec(
                f"sleep 0.2; grep -q 'rollout {i}' task.txt && echo {answer} > answer.txt"
            )
            verify = await sandbox.exec(["python3", "/tests/verify.py"], timeout_s=60)
            assert harness.ok and verify.ok, f"rollout {i}: {harness} {verify}"
            reward = json.loads(await sandbox.get_file("/logs/verifier/reward.json"))["reward"]
            return i, reward, (await sandbox.exec("id -u")).stdout.decode().strip()
        finally:
            await sandbox.destroy()

    async def scenario():
        return await asyncio.gather(*(rollout(i) for i in range(32)))

    results = asyncio.run(scenario())
    assert [i for i, _, _ in results] == list(range(32)), "every rollout must finish"
    assert [r for _, r, _ in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(32)], (
        "each rollout must be verified on its own files (a mix-up shows as a wrong reward)"
    )
    assert os.geteuid() != 0 or len({uid for _, _, uid in results}) == 32, (
        "concurrent sandboxes must not share a uid"
    )
    assert not [p for p in backend.root.iterdir() if not p.name.startswith(".")], "all storage is cleaned up"
