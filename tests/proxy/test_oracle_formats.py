"""The oracle teacher's answers, harness by harness, and a solution of several files run for real."""

import json
import subprocess
from pathlib import Path

from clawgym.protocols.conversation import Conversation, Message, Tool
from clawgym.proxy.oracle import MINI_SUBMIT, oracle_turn, solution_command
from clawgym.tasks.model import Task, TaskFile, VerifierSpec

BASH = Tool("Bash", "run", {"type": "object", "properties": {"command": {"type": "string"}}})


def test_a_solution_of_several_files_runs_from_a_fresh_folder(tmp_path: Path):
    """Its files are written (base64) next to the script, which runs in the working directory."""
    solution = tmp_path / "solution"
    (solution / "data").mkdir(parents=True)
    (solution / "data" / "word.txt").write_text("kiwi\n")
    (solution / "solve.sh").write_text('#!/usr/bin/env bash\ncp "$(dirname "$0")/data/word.txt" out.txt\n')
    task = Task(id="t", instruction="i", format="clawgym", source_dir=tmp_path,
                verifier=VerifierSpec(kind="reward_sh", files=(), script="reward.sh"),
                solution=(TaskFile(solution, "/solution"),), solution_script="/solution/solve.sh")  # fmt: skip
    command = solution_command(task)
    assert "kiwi" not in command, "file contents travel encoded"
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["bash", "-c", command], cwd=work, check=True)
    assert (work / "out.txt").read_text() == "kiwi\n", "the script ran with its files beside it"


def test_each_harness_gets_the_solution_in_its_own_format_then_its_way_of_finishing():
    """A shell tool: a call of it, then a reply without one (mini-swe-agent: its submit command as a
    call); mini-swe-agent text: its fenced block; the reference harness: a bash fence, then DONE."""
    ask = Conversation((Message("user", "do it"),), (BASH,))
    act = oracle_turn("claude-code", ask, "touch x")
    assert [(c.name, json.loads(c.arguments)) for c in act.tool_calls] == [("Bash", {"command": "touch x"})]
    done = Conversation((*ask.messages, act, Message("tool", "", tool_call_id="1")), ask.tools)
    assert oracle_turn("claude-code", done, "touch x").tool_calls == (), "finishing is a reply with no call"
    assert json.loads(oracle_turn("mini-swe-agent", done, "touch x").tool_calls[0].arguments) == {
        "command": MINI_SUBMIT
    }
    text = Conversation((Message("user", "do it"),))
    assert oracle_turn("mini-swe-agent", text, "touch x").content.endswith(
        "```mswea_bash_command\ntouch x\n```"
    )
    assert oracle_turn("reference", text, "touch x").content == "```bash\ntouch x\n```"
    acted = Conversation(
        (*text.messages, Message("assistant", "```bash\ntouch x\n```"), Message("user", "ok"))
    )
    assert oracle_turn("reference", acted, "touch x").content == "DONE"
    assert MINI_SUBMIT in oracle_turn("mini-swe-agent", acted, "touch x").content


def test_a_multi_line_command_already_called_is_seen_as_acted():
    """A solution of several lines travels in a tool call's JSON with escaped newlines: the oracle
    finds it in the call's argument values and finishes, instead of calling it again."""
    command = "set -e\ngrep -w tree guests.md > contacts.md"
    ask = Conversation((Message("user", "do it"),), (BASH,))
    act = oracle_turn("opencode", ask, command)
    assert json.loads(act.tool_calls[0].arguments) == {"command": command}
    done = Conversation((*ask.messages, act, Message("tool", "", tool_call_id="1")), ask.tools)
    assert oracle_turn("opencode", done, command) == Message("assistant", "The task is done.")


def test_a_tool_calling_clis_side_call_gets_a_short_title():
    """opencode asks for a title in a request without tools: the oracle answers with the task's
    first words, not a command (which would teach the policy to answer titles with code)."""
    title = Conversation(
        (
            Message("system", "You are a title generator."),
            Message("user", '"Write the lines of guests.md that contain the word tree into contacts.md."'),
        )
    )
    assert oracle_turn("opencode", title, "grep").content == "Write the lines of guests.md that contain the"
    assert oracle_turn("reference", title, "grep").content == "```bash\ngrep\n```", "a text harness acts"
