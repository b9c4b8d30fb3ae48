"""A sandbox whose owning process was killed -9: another process made it, then died holding it.

`sandbox_of_a_killed_process(sandbox_cfg)` starts a Python process that builds the backend
`sandbox_cfg` names (a `SandboxConfig` as a dict), creates one sandbox, prints its id and waits;
it is then SIGKILLed (no cleanup of any kind), and the id is returned. What it left is what an
orchestrator that crashed mid-rollout leaves.
"""

import json
import os
import signal
import subprocess
import sys

_MAKE_AND_HOLD = """
import asyncio, json, sys
from clawgym.sandbox import SandboxConfig, SandboxSpec, make_sandbox_backend

async def main():
    backend = make_sandbox_backend(SandboxConfig(**json.loads(sys.argv[1])))
    sandbox = await backend.create(SandboxSpec(workdir="/app", network="none"))
    print(sandbox.id, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def sandbox_of_a_killed_process(sandbox_cfg: dict) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-c", _MAKE_AND_HOLD, json.dumps(sandbox_cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sandbox_id = proc.stdout.readline().strip()
        assert sandbox_id, f"test setup: the other process made no sandbox: {proc.stderr.read()[-2000:]}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    return sandbox_id
