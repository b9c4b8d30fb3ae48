"""Every vLLM and torch name clawgym uses exists as used, in the pinned versions (api_contract.py).

vLLM is checked in its own venv, which the first test needing it builds (tests/contracts/
build_vllm_venv.sh: ~1.5-3 min and ~3.7 GB once, kept after). torch is the main venv's. Each check is shown to bite: the
same checker against a package with one used name renamed or one used parameter removed reports it.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines import require_engine

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tests/contracts/api_contract.py"
VLLM_VENV = ROOT / ".venv-vllm"
PINS = dict(
    line.split("==") for line in (ROOT / "deploy/vllm-pins.txt").read_text().splitlines() if "==" in line
)


def check(python: Path | str, target: str, *sabotage: str) -> dict:
    args = [str(python), str(CHECKER), target] + [a for s in sabotage for a in ("--sabotage", s)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    out = done.stdout[done.stdout.index("{") :] if "{" in done.stdout else ""
    assert out, f"the checker printed no result (rc {done.returncode}): {done.stderr[-2000:]}"
    result = json.loads(out)
    assert (done.returncode == 0) == (not result["problems"]), "exit status and problems disagree"
    return result


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    python = VLLM_VENV / "bin/python"
    # builds it, or keeps it when it already holds the pin
    built = subprocess.run(
        ["bash", str(ROOT / "tests/contracts/build_vllm_venv.sh"), str(VLLM_VENV)],
        capture_output=True, text=True, timeout=1800, cwd=ROOT,
    )  # fmt: skip
    if built.returncode != 0 or not python.exists():
        require_engine(f"the vLLM contract venv could not be built at {VLLM_VENV}: {built.stderr[-2000:]}")
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert version == PINS["vllm"], f"{VLLM_VENV} has vLLM {version}, the pin is {PINS['vllm']}: rebuild it"
    return python


def test_the_vllm_pin_is_the_one_the_image_and_the_docs_name():
    """deploy/vllm-pins.txt is the one place; the Dockerfile's ARG and deploy/vllm.md follow it."""
    dockerfile = (ROOT / "deploy/docker/inference-vllm.Dockerfile").read_text()
    arg = re.search(r"^ARG VLLM_VERSION=v?(\S+)$", dockerfile, re.M)
    assert arg and arg.group(1) == PINS["vllm"], f"Dockerfile VLLM_VERSION {arg and arg.group(1)} != pin"
    docs = (ROOT / "deploy/vllm.md").read_text()
    assert f"| {PINS['vllm']} " in docs, f"deploy/vllm.md's versions table does not name {PINS['vllm']}"
    import torch

    assert torch.__version__.split("+")[0] == PINS["torch"], "the main venv's torch is not the pinned one"


def test_every_vllm_name_the_engine_uses_exists_as_used(vllm_python):
    """Imports, engine args, sampling fields, AsyncLLM methods and their keywords, the worker hook."""
    result = check(vllm_python, "vllm")
    assert result["problems"] == [], "vLLM no longer has what the engine uses:\n" + "\n".join(
        result["problems"]
    )
    assert result["checked"] >= 40, f"only {result['checked']} uses found: is the source parser blind?"


def test_a_renamed_or_reshaped_vllm_name_is_reported(vllm_python):
    """The test of the test: reset_prefix_cache renamed away (from AsyncLLM and the EngineClient it
    inherits from), TokensPrompt renamed, collective_rpc without `args`, a SamplingParams without
    `detokenize`: each is named with the line that uses it."""
    result = check(
        vllm_python,
        "vllm",
        "vllm.v1.engine.async_llm:AsyncLLM.reset_prefix_cache",
        "vllm.engine.protocol:EngineClient.reset_prefix_cache",
        "vllm.inputs:TokensPrompt",
        "vllm.v1.engine.async_llm:AsyncLLM.collective_rpc:drop=args",
        "vllm:SamplingParams:drop=detokenize",
    )
    problems = "\n".join(result["problems"])
    assert "AsyncLLM:reset_prefix_cache" in problems, problems
    assert "vllm.inputs.TokensPrompt: AttributeError" in problems, problems
    assert re.search(r"AsyncLLM:collective_rpc: signature .* unexpected keyword argument 'args'", problems), (
        problems
    )
    assert "vllm.SamplingParams: signature" in problems and "'detokenize'" in problems, problems
    assert re.search(r"vllm_engine\.py:\d+: ", problems), "a problem must name the adapter's line"


def test_every_torch_name_the_trainer_uses_exists_as_used():
    """FSDP2 (fully_shard and its keywords, passed as **options), FlexAttention, CUDA IPC."""
    result = check(sys.executable, "torch")
    assert result["problems"] == [], "torch no longer has what the trainer uses:\n" + "\n".join(
        result["problems"]
    )
    assert result["checked"] >= 50, f"only {result['checked']} uses found"


def test_a_renamed_or_reshaped_torch_name_is_reported():
    """fully_shard without `mesh` and a renamed create_block_mask are both caught."""
    result = check(
        sys.executable,
        "torch",
        "torch.distributed.fsdp:fully_shard:drop=mesh",
        "torch.nn.attention.flex_attention:create_block_mask",
    )
    problems = "\n".join(result["problems"])
    assert "fully_shard: signature" in problems and "'mesh'" in problems, problems
    assert "packing.py" in problems and "create_block_mask" in problems, problems


def test_the_inference_image_keeps_vllms_versions_when_it_adds_clawgyms_requirements(vllm_python):
    """The vLLM image installs clawgym's requirements (less torch) over vLLM's own: each must admit a
    version vLLM's own requirement admits (a transformers floor above vLLM's ceiling would replace
    vLLM's transformers there). Candidates: the version in the contract venv and clawgym's pins."""
    from packaging.requirements import Requirement

    sys.path.insert(0, str(ROOT / "deploy/docker"))
    from requirements import requirements

    ours = [Requirement(r) for r in requirements(str(ROOT / "pyproject.toml"), {"torch"})]
    script = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({'requires': m.requires('vllm'), 'versions': {d.metadata['Name'].lower(): d.version "
        "for d in m.distributions()}}))"
    )
    done = subprocess.run([str(vllm_python), "-c", script], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    theirs = {r.name.lower(): r.specifier for r in map(Requirement, found["requires"]) if r.marker is None}
    assert "transformers" in theirs, "test setup: vLLM requires transformers"
    refused = []
    for req in ours:
        spec = theirs.get(req.name.lower())
        if spec is None:
            continue
        pins = [s.version for s in req.specifier if s.operator == "=="]
        candidates = [v for v in (found["versions"].get(req.name.lower()), *pins) if v]
        if not any(
            req.specifier.contains(v, prereleases=True) and spec.contains(v, prereleases=True)
            for v in candidates
        ):
            refused.append(f"clawgym's {req} and vLLM's {req.name}{spec} admit none of {candidates}")
    assert not refused, "\n".join(refused)
