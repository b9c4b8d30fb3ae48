"""What a sandbox's environment may hold, and the fixed environment its host-side launchers get.

A task suite is third-party input, and a variable it sets can make a process run code the
variable names before that process does anything of its own: the dynamic loader's `LD_PRELOAD`
and `LD_AUDIT`, glibc's `GCONV_PATH`, a shell's `BASH_ENV`/`ENV`, an interpreter's startup hooks.
So those names are refused wherever an environment enters a sandbox (a task at load, a sandbox
spec, an exec), and the processes that start a sandbox on the host (the cgroup join, `prlimit`,
`bwrap`, the Docker CLI) never see a sandbox's environment at all: they run with `LAUNCHER_ENV`,
and the sandbox's environment is applied inside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from clawgym.errors import InvalidArgument

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Everything a launcher on the host needs: where to find its programs.
LAUNCHER_ENV: Mapping[str, str] = {"PATH": DEFAULT_PATH}

# Names (and prefixes) that make a loader, a shell or an interpreter run code named by the value.
LOADER_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")
LOADER_NAMES = frozenset(
    {
        "GCONV_PATH",  # glibc loads iconv modules from it
        "LOCPATH",  # glibc parses locale data from it
        "BASH_ENV",  # bash sources it before a script
        "ENV",  # sh/dash source it in interactive shells
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",  # expanded (command substitution included) under `set -x`
        "PROMPT_COMMAND",
        "PYTHONSTARTUP",
        "PYTHONHOME",  # moves the standard library
        "PYTHONWARNINGS",  # a warning category is imported by name
        "PERL5OPT",
        "PERL5DB",
        "NODE_OPTIONS",  # --require/--import load modules into every node process
        "RUBYOPT",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
    }
)


def is_loader_variable(name: str) -> bool:
    """True for a variable that makes a process load or run code named by its value."""
    return name in LOADER_NAMES or name.startswith(LOADER_PREFIXES)


def loader_variables(env: Mapping[str, str]) -> list[str]:
    """The loader variables among `env`'s names, sorted."""
    return sorted(name for name in env if is_loader_variable(name))


def check_no_loader_variables(env: Mapping[str, str], what: str) -> None:
    """InvalidArgument naming `what` and the first loader variable in `env`, if any."""
    if found := loader_variables(env):
        raise InvalidArgument(
            f"{what}: environment variable {found[0]} is refused (it makes processes load or run "
            "code named by its value; a sandbox's environment may not set it)"
        )


def check_env(env: Mapping[str, str], what: str) -> None:
    """InvalidArgument naming `what` unless every name is a valid, non-loader variable and no
    value holds a NUL (which no environment can carry)."""
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise InvalidArgument(f"{what}: {name!r} is not a valid variable name")
        if not isinstance(value, str) or "\0" in value:
            raise InvalidArgument(f"{what}: the value of {name} is not a string without NUL bytes")
    check_no_loader_variables(env, what)
