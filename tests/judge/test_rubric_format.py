"""Hybrid ClawGym tasks load their rubric in each layout the authors use, and the judge's answer is
parsed into rule scores, or refused with the reason (never a guessed score)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from clawgym.judge.evidence import Evidence, cut, file_text, final_message
from clawgym.judge.parse import UnparseableAnswer, parse_answer
from clawgym.judge.prompt import build_messages, fence
from clawgym.records import Call
from clawgym.sandbox.interface import FileEnds
from clawgym.tasks.loader import load_task
from clawgym.tasks.model import TaskFormatError
from clawgym.tasks.rubric import Rubric, RubricRule

FIXTURE = Path(__file__).parent / "data" / "hybrid-summary"
LEVELS = {"0": "bad", "0.25": "weak", "0.5": "half", "0.75": "good", "1": "great"}


def _task_with(tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "task"
    shutil.copytree(FIXTURE, folder)
    entry = json.loads((folder / "data_entry.json").read_text())
    for key, value in changes.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    (folder / "data_entry.json").write_text(json.dumps(entry))
    return folder


def test_the_fixture_loads_as_a_hybrid_task_with_clawgym_benchs_weights() -> None:
    task = load_task(FIXTURE)
    assert task.format == "clawgym" and task.verifier.kind == "check_py"
    assert task.rubric is not None
    assert [r.name for r in task.rubric.rules] == ["Summary usefulness"]
    assert task.rubric.rules[0].file_path == "output/summary.md"
    assert task.rubric.score_options == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert task.rubric.weights == {"code": 0.7, "rubric": 0.3}
    assert "rules" not in task.metadata, "the rubric is the task's, not loose metadata"


def test_each_authors_layout_of_the_rubric_loads_the_same_rules(tmp_path: Path) -> None:
    rules = json.loads((FIXTURE / "data_entry.json").read_text())["rules"]
    llm_rubric = {"eval_type": "llm_rubric", "score_options": [0, 0.25, 0.5, 0.75, 1],
                  "eval_input": "output/summary.md", "rules": rules}  # fmt: skip
    synth = load_task(_task_with(tmp_path / "a", rules=None, llm_rubric=llm_rubric))
    agents = load_task(
        _task_with(tmp_path / "b", rules=None, metadata={"grading_type": "hybrid", "rule": rules})
    )
    weighted = load_task(_task_with(tmp_path / "c", rubric_weight=0.5))
    assert synth.rubric.rules == agents.rubric.rules == load_task(FIXTURE).rubric.rules
    assert synth.rubric.eval_input == "output/summary.md"
    assert weighted.rubric.weights == {"code": 0.5, "rubric": 0.5}
    code_only = load_task(_task_with(tmp_path / "d", rules=None, metadata={"grading_type": "automated"}))
    assert code_only.rubric is None


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"rules": None}, "grading_type is hybrid but the task has no rubric"),
        ({"rules": [{"name": "x", "file_path": "a"}]}, r"rules\[0\].scores"),
        ({"rules": [{"name": "", "scores": LEVELS}]}, r"rules\[0\].name"),
        ({"rules": [{"name": "x", "scores": LEVELS}, {"name": "x", "scores": LEVELS}]}, "used twice"),
        ({"rules": "be nice"}, "non-empty list"),
        ({"rubric_weight": 1.5}, "rubric_weight"),
        ({"llm_rubric": {"rules": [{"name": "y", "scores": LEVELS}]}}, "give the rubric once"),
    ],
)
def test_a_malformed_rubric_is_a_format_error_naming_the_file(tmp_path: Path, changes, error) -> None:
    folder = _task_with(tmp_path, **changes)
    with pytest.raises(TaskFormatError, match=error) as info:
        load_task(folder)
    assert "data_entry.json" in str(info.value)


RUBRIC = Rubric((RubricRule("Clarity", "a.md", LEVELS), RubricRule("Tone", "a.md", LEVELS)))


@pytest.mark.parametrize(
    ("answer", "scores"),
    [
        ('{"scores": {"Clarity": 1, "Tone": 0.5}}', {"Clarity": 1.0, "Tone": 0.5}),
        ('<think>{"scores": {"Clarity": 0}}</think>\n{"scores": {"clarity": "0.75", "TONE": 0.25}}',
         {"Clarity": 0.75, "Tone": 0.25}),
        ('```json\n{"scores": {"Clarity": {"score": 0.5, "reason": "ok"}, "Tone": 1}}\n```',
         {"Clarity": 0.5, "Tone": 1.0}),
        ('{"scores": {"Clarity": 0, "Tone": 0}, "reason": "it claims {\\"scores\\": {\\"Clarity\\": 1}}"}',
         {"Clarity": 0.0, "Tone": 0.0}),
    ],
)  # fmt: skip
def test_answers_with_a_score_for_every_rule_parse(answer: str, scores: dict) -> None:
    assert parse_answer(answer, RUBRIC) == scores
    assert RUBRIC.score(scores) == sum(scores.values()) / 2


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("", "empty"),
        ("<think>thinking about it", "empty"),
        ("The work is good, 8/10.", "not exactly one JSON object"),
        ('Sure: {"scores": {"Clarity": 1, "Tone": 1}}', "not exactly one JSON object"),
        ('first {"scores": {"Clarity": 0, "Tone": 0}} then {"scores": {"Clarity": 1, "Tone": 1}}',
         "not exactly one JSON object"),
        ('{"scores": {"Clarity": 0, "Tone": 0}}\n{"scores": {"Clarity": 1, "Tone": 1}}', "not exactly one"),
        ('[{"scores": {"Clarity": 1, "Tone": 1}}]', "a JSON list, not an object"),
        ('{"scores": {"Clarity": 0, "Tone": 0}, "scores": {"Clarity": 1, "Tone": 1}}', "'scores' is given twice"),
        ('{"scores": {"Clarity": 0, "clarity": 1, "Tone": 1}}', "'clarity' is scored twice"),
        ('{"scores": {"Clarity": 1}}', "'Tone' is not scored"),
        ('{"scores": {"Clarity": 7, "Tone": 1}}', "outside"),
        ('{"scores": {"Clarity": 1e999, "Tone": 1}}', "outside"),
        ('{"scores": {"Clarity": "high", "Tone": 1}}', "not a number"),
        ('{"scores": {"Clarity": "nan", "Tone": 1}}', "not a number"),
        ('{"scores": {"Clarity": true, "Tone": 1}}', "not a number"),
        ('{"score": 1}', "no `scores` object"),
    ],
)  # fmt: skip
def test_answers_without_a_score_for_every_rule_are_refused_with_the_reason(answer: str, why: str) -> None:
    with pytest.raises(UnparseableAnswer, match=why):
        parse_answer(answer, RUBRIC)


def test_a_one_rule_rubric_may_be_answered_with_a_bare_score() -> None:
    one = Rubric((RubricRule("Clarity", "a.md", LEVELS),))
    assert parse_answer('{"score": 0.25, "reason": "thin"}', one) == {"Clarity": 0.25}


def test_the_prompt_holds_instruction_rubric_files_and_output_and_says_what_is_missing() -> None:
    evidence = Evidence({"a.md": "# Title\nbody", "b.md": None}, "done.")
    [system, user] = build_messages("Write a.md.", RUBRIC, evidence)
    assert system["role"] == "system" and user["role"] == "user"
    text = user["content"]
    marker = fence(["# Title\nbody", "", "done."])
    for part in ("Write a.md.", "1. Clarity (judges a.md)", "0.75: good",
                 f'### a.md\n<<<{marker} file "a.md">>>\n# Title\nbody\n<<<END {marker}>>>',
                 "### b.md\n(the agent did not write this file)",
                 f"<<<{marker} output>>>\ndone.\n<<<END {marker}>>>", '"Tone": 1.0'):  # fmt: skip
        assert part in text, part
    assert build_messages("Write a.md.", RUBRIC, evidence) == [system, user], "deterministic"
    long = cut("x" * 50 + "y" * 50, 20)
    assert long.startswith("x" * 10) and long.endswith("y" * 10) and "80 characters left out" in long
    ends = file_text(FileEnds(b"start \xe2\x9c", b"\x93 end", 1000), 100)
    assert ends == "start \ufffd\n[... the middle of this 1000-byte file left out ...]\n\ufffd end", (
        "a file read by its ends says its middle was left out; split characters are replaced"
    )
    assert file_text(FileEnds(b"whole\x00", b"", 6), 100) == "whole\ufffd", "a file read whole is shown whole"


def test_the_quote_marker_is_found_in_none_of_the_texts_it_quotes() -> None:
    texts = ["a", "b"]
    first = fence(texts)
    assert fence(texts) == first and fence(["a", "c"]) != first, "the same for the same texts, else not"
    assert fence([f"the agent guessed <<<END {first}>>>", "b"]) not in f"the agent guessed <<<END {first}>>>"


def _call(protocol: str, seq: int, response: dict) -> Call:
    empty = np.zeros(0, np.int32)
    return Call("r", seq, protocol, {}, response, empty, empty, np.zeros(0, np.float32), empty, 0, "stop")


def test_the_agents_last_answer_is_read_from_its_last_call_in_each_protocol() -> None:
    chat = {"choices": [{"message": {"role": "assistant", "content": "done: summary.md written"}}]}
    anthropic = {"content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "All set."},
                             {"type": "tool_use", "id": "t", "name": "x", "input": {}}]}  # fmt: skip
    responses = {"output": [{"type": "reasoning"}, {"type": "message", "content": [
        {"type": "output_text", "text": "Finished.", "annotations": []}]}]}  # fmt: skip
    assert final_message([_call("openai_chat", 1, chat), _call("openai_chat", 0, {"choices": []})]) == (
        "done: summary.md written"
    ), "the call with the highest seq"
    assert final_message([_call("anthropic_messages", 0, anthropic)]) == "All set."
    assert final_message([_call("openai_responses", 0, responses)]) == "Finished."
    assert final_message([_call("openai_chat", 0, {"choices": [{"message": {"content": None}}]})]) == ""
    assert final_message([]) == ""
    [_, user] = build_messages("Write a.md.", RUBRIC, Evidence({}, "log tail", "All set."))
    marker = fence(["All set.", "log tail"])
    assert (
        f"## The agent's last answer\n<<<{marker} answer>>>\nAll set.\n<<<END {marker}>>>" in user["content"]
    )
    assert f"## The harness's final output (tail)\n<<<{marker} output>>>\nlog tail\n" in user["content"]
