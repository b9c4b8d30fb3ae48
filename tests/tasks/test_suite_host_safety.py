"""Nothing in a task suite reaches this host's processes: loader variables are refused at load,
and setup steps install only plain registry packages, without running install code.

A suite imported from a git URL is third-party input. Its Dockerfile's `ENV` becomes the task's
environment and its `RUN` installs become setup steps that the local backend provisions on the
host, so both are attacked here through the real loader, the real `tasks import` CLI and real
pip and npm.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clawgym.tasks.loader import load_task
from clawgym.tasks.model import SetupStep, TaskFormatError
from clawgym.tasks.provision import Provisioner, Unsupported
from clawgym_app.cli import app

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def tb_task(folder: Path, dockerfile_tail: str) -> Path:
    """The csv-total Terminal-Bench task with lines added to its Dockerfile."""
    shutil.copytree(DATA / "terminal-bench" / "csv-total", folder)
    dockerfile = folder / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + dockerfile_tail)
    return folder


@pytest.mark.parametrize(
    "line, variable",
    [
        ("ENV LD_PRELOAD=/app/evil.so", "LD_PRELOAD"),
        ("ENV LD_AUDIT /app/evil.so", "LD_AUDIT"),
        ('ENV BASH_ENV="/app/hook.sh" OTHER=1', "BASH_ENV"),
        ("ENV PYTHONSTARTUP=/app/hook.py", "PYTHONSTARTUP"),
        ("ENV NODE_OPTIONS=--require=/app/hook.js", "NODE_OPTIONS"),
    ],
)
def test_a_task_whose_environment_sets_a_loader_variable_does_not_load(tmp_path, line, variable):
    task = tb_task(tmp_path / "evil-env", f"{line}\n")
    with pytest.raises(TaskFormatError) as refused:
        load_task(task)
    assert "task evil-env" in str(refused.value) and variable in str(refused.value), str(refused.value)


def test_tasks_import_reports_the_loader_variable_and_imports_the_others(tmp_path):
    src = tmp_path / "src"
    tb_task(src / "evil-env", "ENV LD_PRELOAD=/app/evil.so\n")
    tb_task(src / "fine", "ENV GREETING=hello\n")
    result = runner.invoke(
        app, ["tasks", "import", str(src), "--name", "s", "--root", str(tmp_path / "suites"), "--json"]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    by_path = {line["path"]: line for line in lines[:-1]}
    assert by_path["evil-env"]["status"] == "broken" and not by_path["evil-env"]["imported"], by_path
    assert "LD_PRELOAD" in by_path["evil-env"]["reason"], by_path["evil-env"]
    assert by_path["fine"]["imported"], by_path["fine"]
    assert not (tmp_path / "suites" / "s" / "evil-env").exists(), "a refused task is not copied"


@pytest.mark.parametrize(
    "run, what",
    [
        ("RUN pip install ./evil", "./evil"),
        ("RUN pip install -f ./wheels numpy", "./wheels"),
        ("RUN pip install git+https://example.com/x.git", "git+https"),
        ("RUN npm install -g file:../evil", "file:../evil"),
        ("RUN npm install -g someone/repo", "someone/repo"),
        ("RUN apt-get install -y ./evil.deb", "./evil.deb"),
    ],
)
def test_a_setup_step_from_a_local_path_or_url_makes_the_task_unsupported_locally(tmp_path, run, what):
    task = load_task(tb_task(tmp_path / "evil-setup", f"{run}\n"))
    assert task.unsupported is not None and what in task.unsupported, task.unsupported
    assert not any(what in p for step in task.setup for p in step.packages), task.setup


def _evil_python_package(folder: Path, marker: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "setup.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('setup.py ran on the host')\n"
        "from setuptools import setup\nsetup(name='evil', version='0.1')\n"
    )
    return folder


def _evil_npm_package(folder: Path, marker: Path) -> Path:
    folder.mkdir(parents=True)
    script = f"node -e \"require('fs').writeFileSync('{marker}', 'postinstall ran on the host')\""
    manifest = {"name": "evil", "version": "0.1.0", "scripts": {"postinstall": script}}
    (folder / "package.json").write_text(json.dumps(manifest))
    return folder


def test_the_provisioner_installs_no_path_and_runs_no_install_code(tmp_path):
    """A setup step that names a folder with a setup.py or an npm postinstall would run it on this
    host (as root in CI): the provisioner refuses both before pip or npm starts."""
    marker = tmp_path / "host-marker"
    provisioner = Provisioner(cache_dir=tmp_path / "cache", python=sys.executable)
    python_pkg = _evil_python_package(tmp_path / "evil-py", marker)
    with pytest.raises(Unsupported, match="not a requirement from the package index"):
        provisioner.provision([SetupStep("pip", (str(python_pkg),))])
    if shutil.which("npm") is not None:
        npm_pkg = _evil_npm_package(tmp_path / "evil-npm", marker)
        with pytest.raises(Unsupported, match="not a package name from the registry"):
            provisioner.provision([SetupStep("npm", (str(npm_pkg),))])
    assert not marker.exists(), marker.read_text()
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir()), (
        "nothing was installed"
    )


def test_the_provisioners_pip_takes_wheels_only(tmp_path, monkeypatch):
    """Even a requirement from the index never builds an sdist here (its setup.py would run on
    this host): pip is told --only-binary. The sdist lies in a find-links folder pip also reads."""
    marker = tmp_path / "host-marker"
    name = "clawgym-test-sdist-only-7f3a"
    links = tmp_path / "links"
    links.mkdir()
    with tarfile.open(links / f"{name}-0.1.tar.gz", "w:gz") as sdist:
        for member, text in {
            "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
            "setup.py": (
                f"import pathlib\npathlib.Path({str(marker)!r}).write_text('setup.py ran on the host')\n"
                f"from setuptools import setup\nsetup(name={name!r}, version='0.1')\n"
            ),
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-0.1/{member}")
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))  # pip reads its options from its environment
    provisioner = Provisioner(cache_dir=tmp_path / "cache", python=sys.executable)
    with pytest.raises(Unsupported, match=name):
        provisioner.provision([SetupStep("pip", (f"{name}==0.1",))])
    assert not marker.exists(), "the sdist's setup.py ran on the host"
