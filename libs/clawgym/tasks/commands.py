"""What a shell solution is made of: its programs, its flags and its answer shape.

Held-out reporting uses it to say how close an evaluated task is to the training tasks: a family
whose solutions run a program a trained family runs (`mkdir` in `make_dir` and `make_nested_dirs`)
is a sibling of that family, and one whose answer shape equals a training task's (`mv ARG ARG`)
differs from it only in names. The shape keeps programs, flags and shell operators and turns every
other word into `ARG`: `echo hello > a.txt` is `echo ARG > ARG`. Shell settings (`set -e`) and
comments are not part of an answer. Parsing is `shlex`'s, so a script it cannot split (an unclosed
quote) yields what it read before the error.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

OPERATORS = frozenset({">", ">>", "<", "|", "&&", "||", ";", "&", "(", ")"})
_REDIRECTS = frozenset({">", ">>", "<"})
_SEPARATORS = frozenset({"&&", "||", ";", "&", "|", "(", ")"})


@dataclass(frozen=True)
class CommandParts:
    """A script's answer: its shape (one tuple per line), programs and flags."""

    shape: tuple[tuple[str, ...], ...]
    programs: frozenset[str]
    flags: frozenset[str]


def command_parts(script: str) -> CommandParts:
    """The programs, flags and shape of a shell script (lines: a `#!`, comments, `set` skipped)."""
    shape: list[tuple[str, ...]] = []
    programs: set[str] = set()
    flags: set[str] = set()
    for line in script.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.split()[0] == "set":
            continue
        words = _line_shape(stripped, programs, flags)
        if words:
            shape.append(words)
    return CommandParts(tuple(shape), frozenset(programs), frozenset(flags))


def _line_shape(line: str, programs: set[str], flags: set[str]) -> tuple[str, ...]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    at_start = True
    try:
        for word in lexer:
            if word in OPERATORS:
                words.append(word)
                at_start = word in _SEPARATORS
            elif at_start and "=" in word and not word.startswith("="):
                words.append("VAR=ARG")  # an assignment before the program
            elif at_start:
                words.append(word)
                programs.add(word)
                at_start = False
            elif word.startswith("-") and len(word) > 1:
                words.append(word)
                flags.add(word)
            else:
                words.append("ARG")
    except ValueError:  # an unclosed quote: keep what was read
        pass
    return tuple(words)
