"""The import layers of pyproject.toml `[tool.importlinter]`, checked by `lint-imports`.

The repository must keep every contract. Each contract is also shown to bite: a copy of the source
gets one forbidden import planted in it, and `lint-imports` run on that copy must fail, name the
contract, and report the planted import. Reporting the planted import is what proves the copy was
analysed and not the installed (editable) package.

The copy is laid out as the installed packages are (pyproject `[tool.setuptools.package-dir]`):
`<tmp>/pkgs/clawgym` ← libs/clawgym, `<tmp>/pkgs/clawgym_app` ← libs/clawgym_app,
`<tmp>/pkgs/clawgym_services` ← services, with `PYTHONPATH=<tmp>/pkgs`. Path entries come before
the editable install's finder on `sys.meta_path`, so the copy is the one found.
"""

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = REPO / ".venv" / "bin" / "lint-imports"
PACKAGE_DIRS = {"clawgym": "libs/clawgym", "clawgym_app": "libs/clawgym_app", "clawgym_services": "services"}
CONTRACTS = {c["id"]: c for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}  # fmt: skip


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the venv's lint-imports in `cwd` (which holds the pyproject.toml it reads), uncached."""
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: install the dev extra (./install.sh)"
    env = {**os.environ, "COLUMNS": "500"}  # one contract per line: names are not wrapped at 80
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    argv = [str(LINT_IMPORTS), "--no-cache", "--no-logo"]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def broken(contract_id: str, result: subprocess.CompletedProcess[str]) -> bool:
    """Whether lint-imports reported the contract `contract_id` as BROKEN."""
    return f"{CONTRACTS[contract_id]['name']} BROKEN" in result.stdout


def plant(path: Path, line: str) -> int:
    """Append `line` to the module at `path`; return its line number."""
    text = path.read_text()
    if not text.endswith("\n"):
        text += "\n"
    path.write_text(text + line + "\n")
    return text.count("\n") + 1


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the three packages under `<tmp>/pkgs` and of pyproject.toml; returns `<tmp>`."""
    ignore = shutil.ignore_patterns("__pycache__", ".venv", ".import_linter_cache", "*.pyc")
    for package, source in PACKAGE_DIRS.items():
        shutil.copytree(REPO / source, tmp_path / "pkgs" / package, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_copy(copy: Path) -> subprocess.CompletedProcess[str]:
    return lint_imports(copy, pythonpath=copy / "pkgs")


# --- the repository ---


def test_the_repository_keeps_every_import_contract():
    """`lint-imports` on the repository exits 0: every layer rule in pyproject.toml holds."""
    result = lint_imports(REPO)
    assert result.returncode == 0, (
        "an import breaks a layer contract of pyproject.toml [tool.importlinter] "
        f"(lint-imports exited {result.returncode}):\n{result.stdout}{result.stderr}"
    )


# --- each contract bites on a planted import ---


def test_the_library_importing_the_app_breaks_the_library_contract(copy: Path):
    """`import clawgym_app` in clawgym.trajectory.radix: clawgym must never import the app."""
    line = plant(copy / "pkgs/clawgym/trajectory/radix.py", "import clawgym_app")
    result = lint_copy(copy)
    assert result.returncode != 0, f"lint-imports let clawgym import clawgym_app:\n{result.stdout}"
    assert broken("library-below-app-and-services", result), (
        f"the library contract was not reported broken by clawgym -> clawgym_app:\n{result.stdout}"
    )
    assert f"clawgym.trajectory.radix -> clawgym_app (l.{line})" in result.stdout, (
        f"the planted import is not reported, so lint-imports did not analyse the copy:\n{result.stdout}"
    )


def test_one_service_importing_another_breaks_the_services_contract(copy: Path):
    """`from clawgym_services.store import server` in the proxy service: services are independent."""
    planted = "from clawgym_services.store import server"
    line = plant(copy / "pkgs/clawgym_services/proxy/__main__.py", planted)
    result = lint_copy(copy)
    assert result.returncode != 0, f"lint-imports let the proxy service import the store's:\n{result.stdout}"
    assert broken("services-independent", result), (
        f"the services contract was not reported broken by proxy -> store:\n{result.stdout}"
    )
    assert f"clawgym_services.proxy.__main__ -> clawgym_services.store.server (l.{line})" in result.stdout, (
        f"the planted import is not reported, so lint-imports did not analyse the copy:\n{result.stdout}"
    )


def test_the_app_importing_a_service_outside_serve_breaks_the_app_contract(copy: Path):
    """`from clawgym_services.proxy import __main__` in the browse command: only `clawgym serve` imports a
    service. The serve command's own imports stay allowed (the repository test above holds them)."""
    line = plant(copy / "pkgs/clawgym_app/commands/browse.py", "from clawgym_services.proxy import __main__")
    result = lint_copy(copy)
    assert result.returncode != 0, f"lint-imports let the browse command import a service:\n{result.stdout}"
    assert broken("app-imports-services-only-in-serve", result), (
        f"the app contract was not reported broken by clawgym_app -> clawgym_services:\n{result.stdout}"
    )
    assert f"clawgym_app.commands.browse -> clawgym_services.proxy.__main__ (l.{line})" in result.stdout, (
        f"the planted import is not reported, so lint-imports did not analyse the copy:\n{result.stdout}"
    )


def test_the_rl_maths_importing_sqlalchemy_breaks_the_maths_contract(copy: Path):
    """`import sqlalchemy` in clawgym.rl.advantages: the maths imports no I/O package."""
    line = plant(copy / "pkgs/clawgym/rl/advantages.py", "import sqlalchemy")
    result = lint_copy(copy)
    assert result.returncode != 0, f"lint-imports let clawgym.rl import sqlalchemy:\n{result.stdout}"
    assert broken("maths-without-io", result), (
        f"the maths contract was not reported broken by clawgym.rl -> sqlalchemy:\n{result.stdout}"
    )
    assert f"clawgym.rl.advantages -> sqlalchemy (l.{line})" in result.stdout, (
        f"the planted import is not reported, so lint-imports did not analyse the copy:\n{result.stdout}"
    )


def test_a_cycle_between_two_library_siblings_breaks_the_acyclic_contract(copy: Path):
    """clawgym.arrays -> clawgym.policies and back (neither imports the other today): a cycle.

    lint-imports lists only the first five dependencies that would break the cycles, in name order.
    `arrays` sorts before every other child of clawgym, and it imports policies once while policies
    imports it twice, so the cheapest edge to cut, and the one listed first, is the planted
    `.arrays -> .policies`, even while other cycles exist.
    """
    plant(copy / "pkgs/clawgym/arrays.py", "from clawgym import policies")
    plant(copy / "pkgs/clawgym/policies/specs.py", "from clawgym import arrays")
    plant(copy / "pkgs/clawgym/policies/resolve.py", "from clawgym import arrays")
    result = lint_copy(copy)
    assert result.returncode != 0, f"lint-imports let arrays and policies import each other:\n{result.stdout}"
    assert broken("library-acyclic", result), (
        f"the acyclic contract was not reported broken by arrays <-> policies:\n{result.stdout}"
    )
    assert "- .arrays -> .policies (1 import)" in result.stdout, (
        f"the planted cycle is not reported, so lint-imports did not analyse the copy:\n{result.stdout}"
    )
