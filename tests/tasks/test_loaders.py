"""Loading tasks in the ClawGym, Terminal-Bench 1 and Harbor formats (sample tasks in ./data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawgym.tasks.dockerfile import plan_dockerfile
from clawgym.tasks.loader import detect_format, find_task_dirs, load_task, load_tasks
from clawgym.tasks.model import TaskFile, TaskFormatError
from clawgym.tasks.verify import combine_scores, parse_reward, pytest_reward

DATA = Path(__file__).parent / "data"


def test_clawgym_task_mounts_its_workspace_at_input_mount_dir():
    task = load_task(DATA / "clawgym" / "write-greeting")
    src = DATA / "clawgym" / "write-greeting"
    assert task.format == "clawgym" and task.id == "write-greeting"
    assert task.instruction.startswith("Read the name in name.txt"), "user_query is the instruction"
    assert task.workdir == "/root/.openclaw/workspace", "input_mount_dir is where the workspace is mounted"
    assert task.files == (TaskFile(src / "input_files", "/root/.openclaw/workspace"),), (
        "input_files go into the workspace"
    )
    assert task.verifier.kind == "reward_sh" and task.verifier.script == "/tests/reward.sh"
    assert task.verifier.files == (TaskFile(src / "reward", "/tests"),), (
        "reward/ is copied to /tests only to verify"
    )
    assert task.solution_script == "/solution/solve.sh" and task.has_solution
    assert task.metadata == {"category": "files"}, "unknown data_entry fields are kept as metadata"
    assert task.unsupported is None


def test_clawgym_task_with_check_py_and_defaults():
    task = load_task(DATA / "clawgym" / "sum-scores")
    assert task.id == "sum-scores", "without an id the folder name is the id"
    assert task.workdir == "/workspace", "without input_mount_dir the workspace is /workspace"
    assert task.verifier.kind == "check_py" and task.verifier.threshold == 1.0


def test_clawgym_task_without_solution_has_none():
    task = load_task(DATA / "clawgym" / "make-notes-dir")
    assert not task.has_solution and task.solution == () and task.split == "test"


def test_terminal_bench_task_runs_its_tests_with_pytest_in_app():
    task = load_task(DATA / "terminal-bench" / "csv-total")
    src = DATA / "terminal-bench" / "csv-total"
    assert task.format == "terminal-bench" and task.workdir == "/app", "WORKDIR of the Dockerfile"
    assert task.instruction.startswith("The file /app/sales.csv")
    assert task.verifier.kind == "pytest" and task.verifier.test_files == ("/tests/test_outputs.py",)
    assert task.verifier.env == {"TEST_DIR": "/tests"} and task.verifier.timeout_s == 60.0
    assert task.files == (TaskFile((src / "sales.csv").resolve(), "/app/sales.csv"),), (
        "COPY becomes a task file"
    )
    assert [(s.manager, s.packages) for s in task.setup] == [("apt", ("coreutils",))], (
        "apt install becomes a setup step"
    )
    assert task.solution == (TaskFile(src / "solution.sh", "/solution/solution.sh"),)
    assert task.agent_timeout_s == 300.0 and task.unsupported is None


def test_terminal_bench_task_with_a_second_service_is_unsupported_with_a_reason():
    task = load_task(DATA / "terminal-bench" / "needs-postgres")
    assert task.unsupported == "needs services besides the task container: client, db"


def test_harbor_task_with_a_self_contained_test_sh_uses_its_reward_file():
    task = load_task(DATA / "harbor" / "count-words")
    assert task.format == "harbor" and task.workdir == "/app"
    assert task.verifier.kind == "reward_file" and task.verifier.reward_file == "/logs/verifier/reward.txt"
    assert task.verifier.script == "/tests/test.sh" and task.verifier.timeout_s == 60.0
    assert "/logs" in task.sandbox_mounts() and "/tests" in task.sandbox_mounts()
    assert task.files[0].target == "/app/words.txt", "COPY words.txt /app/ keeps the file name"
    assert task.agent_timeout_s == 120.0 and task.metadata["difficulty"] == "easy"


def test_harbor_task_whose_test_sh_fetches_pytest_runs_the_tests_with_ours():
    task = load_task(DATA / "harbor" / "json-config")
    assert task.verifier.kind == "pytest", (
        "test.sh curls uv: its test_*.py run with the sandbox's pytest instead"
    )
    assert [(s.manager, s.packages) for s in task.setup] == [("pip", ("six==1.17.0",))]


def test_harbor_task_with_its_own_image_is_unsupported():
    task = load_task(DATA / "harbor" / "custom-image")
    assert task.unsupported == "needs its own image 'registry.example.com/custom/service:1.2'"
    assert not task.has_solution
    assert task.image is not None and task.image.name == "registry.example.com/custom/service:1.2"
    assert task.unsupported_by(task_images=True) is None, "a backend that runs task images runs it"


def test_a_task_whose_dockerfile_builds_things_loads_with_the_reason_and_its_image():
    """The local backend refuses a RUN that is no package install; the task still loads, carrying
    the Dockerfile and context a backend that builds task images (docker) runs it from."""
    src = DATA / "terminal-bench" / "build-sum-tool"
    task = load_task(src)
    assert task.unsupported is not None and "RUN step is not a package install" in task.unsupported, (
        f"the local reason names the RUN line: {task.unsupported}"
    )
    assert task.image is not None
    assert (task.image.dockerfile, task.image.context) == (src / "Dockerfile", src)
    assert task.image.unsupported is None, "its compose file has one service: the image can run it"
    assert task.unsupported_by(task_images=False) == task.unsupported
    assert task.unsupported_by(task_images=True) is None
    own = task.in_own_image()
    assert own.files == () and own.setup == () and own.env == {}, (
        "in its own image nothing of the Dockerfile is replayed (the image holds its COPYs and ENV)"
    )
    assert own.workdir == "/app" and own.verifier == task.verifier


def test_a_second_compose_service_stops_even_a_backend_that_builds_the_image():
    task = load_task(DATA / "terminal-bench" / "needs-postgres")
    assert task.unsupported_by(task_images=True) == "needs services besides the task container: client, db"


def test_formats_are_detected_and_every_sample_loads():
    assert detect_format(DATA / "clawgym" / "sum-scores") == "clawgym"
    assert detect_format(DATA / "terminal-bench" / "csv-total") == "terminal-bench"
    assert detect_format(DATA / "harbor" / "count-words") == "harbor"
    assert detect_format(DATA) is None
    assert len(find_task_dirs(DATA)) == 9, "every sample task folder is found, none of their subfolders"
    assert [t.id for t in load_tasks(DATA / "clawgym", split="test")] == ["make-notes-dir"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"data_entry.json": "{not json"}, "not JSON"),
        ({"data_entry.json": json.dumps({"user_query": ""})}, "user_query must be a non-empty string"),
        ({"data_entry.json": json.dumps({"user_query": "x", "input_mount_dir": "rel/dir"})}, "absolute path"),
        ({"data_entry.json": json.dumps({"user_query": "x"})}, "needs reward/reward.sh or reward/check.py"),
        ({"task.yaml": "difficulty: easy\n"}, "needs an `instruction` string"),
        ({"task.yaml": "instruction: x\n"}, "no tests/ folder"),
        ({"instruction.md": "x", "task.toml": "not = [toml"}, "not TOML"),
        ({"instruction.md": "x"}, "no tests/test.sh"),
        (
            {
                "data_entry.json": json.dumps({"user_query": "x", "timeout_s": "soon"}),
                "reward/reward.sh": "echo 1",
            },
            r"malformed clawgym task \(ValueError",
        ),
        (
            {"instruction.md": "x", "task.toml": 'environment = "docker"'},
            r"malformed harbor task \(AttributeError",
        ),
    ],
)
def test_malformed_tasks_raise_a_format_error_naming_the_problem(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    with pytest.raises(TaskFormatError, match=message):
        load_task(tmp_path)


def test_unknown_format_name_lists_the_known_ones(tmp_path):
    with pytest.raises(TaskFormatError, match="clawgym, terminal-bench, harbor"):
        load_task(tmp_path, "swe-bench")


@pytest.mark.parametrize(
    ("dockerfile", "reason"),
    [
        ("FROM postgres:16\n", "needs its own base image 'postgres:16'"),
        (
            "FROM ubuntu:24.04\nRUN git clone https://x/y && make\n",
            "not a package install: 'git clone https://x/y'",
        ),
        ("FROM python:3.12\nEXPOSE 8080\n", "needs a service"),
        ("FROM python:3.12\nCOPY missing.txt /app/\n", "not a file in the task's build context"),
        ("FROM python:3.12\nRUN pip install -r requirements.txt\n", "installs from local files"),
        (
            "FROM python:3.12\nWORKDIR /app\nCOPY a.txt /usr/local/bin/a\n",
            "read-only system path /usr/local/bin/a",
        ),
    ],
)
def test_dockerfiles_beyond_package_installs_are_unsupported(tmp_path, dockerfile, reason):
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "Dockerfile").write_text(dockerfile)
    plan = plan_dockerfile(tmp_path / "Dockerfile")
    assert plan.unsupported is not None and reason in plan.unsupported, f"got {plan.unsupported!r}"


def test_dockerfile_package_steps_env_and_workdir_are_read(tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\n"
        "ENV LANG=C.UTF-8 MODE=test\nWORKDIR /srv/app\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends \\\n    jq curl && rm -rf /var/lib/apt/lists/*\n"
        "RUN pip install --no-cache-dir numpy==2.1.0 && npm install -g left-pad@1.3.0 && mkdir -p data\n"
    )
    plan = plan_dockerfile(tmp_path / "Dockerfile")
    assert plan.unsupported is None, plan.unsupported
    assert plan.workdir == "/srv/app" and plan.env == {"LANG": "C.UTF-8", "MODE": "test"}
    assert [(s.manager, s.packages) for s in plan.setup] == [
        ("apt", ("jq", "curl")),
        ("pip", ("numpy==2.1.0",)),
        ("npm", ("left-pad@1.3.0",)),
    ]


def test_rewards_are_parsed_from_the_last_line_or_a_json_dict():
    assert parse_reward("checking...\n0.75\n") == 0.75
    assert parse_reward("1.5") == 1.0 and parse_reward("-2") == 0.0, "rewards are clipped to [0, 1]"
    assert parse_reward('{"a": 1, "b": 0}') == 0.5, "sub-scores without a total are averaged"
    assert parse_reward("nan") is None and parse_reward("") is None and parse_reward("ok") is None
    assert combine_scores({"score": 0.3, "x": 1}) == 0.3, "an explicit score wins over the mean"


def test_pytest_reward_is_the_passed_fraction_and_needs_exit_zero_for_full_credit():
    out = "PASSED tests/t.py::a\nFAILED tests/t.py::b - assert\nPASSED tests/t.py::c\n"
    assert pytest_reward(out, 1) == (2 / 3, 2, 3)
    assert pytest_reward("PASSED t::a\n", 0) == (1.0, 1, 1)
    assert pytest_reward("PASSED t::a\n", 2)[0] == 0.0, "an interrupted session is no full pass"
    assert pytest_reward("no tests ran", 5) == (0.0, 0, 0)
