"""The task families of the bundled mini suite: small shell chores a 135M model can learn.

Each family turns a seeded `random.Random` into one `MiniTask`: the instruction, the input files,
the reference solution, and a reward check written in bash. Families run from one command any
shell user knows (level 1: `echo`, `mkdir`) to small pipelines (level 3: `sort`, `grep`, `tr`), so
a small policy solves some from the start and has room to learn the rest. Every check fails on an
untouched workspace, so the nop harness never passes. This module only builds data; `generate`
writes it to disk.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

WORDS = (
    "apple",
    "river",
    "stone",
    "cloud",
    "green",
    "tiger",
    "piano",
    "lemon",
    "north",
    "candle",
    "maple",
    "ocean",
    "rocket",
    "silver",
    "window",
    "garden",
    "pepper",
    "forest",
    "yellow",
    "planet",
    "bread",
    "chair",
    "dream",
    "eagle",
    "flame",
    "grape",
    "honey",
    "island",
    "jungle",
    "kitten",
)
NAMES = (
    "notes",
    "data",
    "result",
    "output",
    "hello",
    "info",
    "report",
    "list",
    "answer",
    "message",
    "todo",
    "log",
    "summary",
    "draft",
    "words",
    "items",
    "story",
    "names",
    "numbers",
    "letter",
)
DIRS = (
    "data",
    "logs",
    "build",
    "docs",
    "backup",
    "images",
    "src",
    "tmp_files",
    "archive",
    "reports",
    "music",
    "cache",
    "tests",
    "assets",
    "notes",
    "videos",
    "photos",
    "scripts",
    "drafts",
    "old",
    "public",
    "config",
    "letters",
    "games",
    "downloads",
    "exports",
    "fonts",
    "models",
    "inbox",
    "outbox",
    "samples",
    "results",
    "uploads",
    "vendor",
)


@dataclass(frozen=True)
class MiniTask:
    """One generated task, before it is written in the ClawGym format."""

    family: str
    level: int
    instruction: str
    check: str  # bash; exit status 0 = solved
    solution: str  # bash, run in the workspace
    inputs: dict[str, str] = field(default_factory=dict)  # file name → content


EXTENSIONS = ("txt", "md", "log")


def _file(rng: random.Random, avoid: tuple[str, ...] = ()) -> str:
    return rng.choice([f"{n}.{e}" for n in NAMES for e in EXTENSIONS if f"{n}.{e}" not in avoid])


def _lines(rng: random.Random, n: int) -> list[str]:
    return rng.sample(WORDS, n)


def _text_is(path: str, text: str) -> str:
    """A check that `path` holds `text` (trailing newlines ignored, as `$(cat)` drops them)."""
    return f'[ -f {path} ] && [ "$(cat {path})" = {shlex.quote(text)} ]'


def _body(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


# --- level 1: one obvious command ---------------------------------------------------------------


def write_word(rng: random.Random) -> MiniTask:
    path, word = _file(rng), rng.choice(WORDS)
    return MiniTask(
        "write_word",
        1,
        f"Create a file named {path} containing the text {word}.",
        _text_is(path, word),
        f"echo {word} > {path}",
    )


def write_number(rng: random.Random) -> MiniTask:
    path, n = _file(rng), rng.randint(2, 999)
    return MiniTask(
        "write_number",
        1,
        f"Write the number {n} into the file {path}.",
        _text_is(path, str(n)),
        f"echo {n} > {path}",
    )


def make_dir(rng: random.Random) -> MiniTask:
    name = rng.choice(DIRS)
    return MiniTask("make_dir", 1, f"Make a directory named {name}.", f"[ -d {name} ]", f"mkdir {name}")


def empty_file(rng: random.Random) -> MiniTask:
    path = _file(rng)
    return MiniTask(
        "empty_file",
        1,
        f"Create an empty file named {path}.",
        f"[ -f {path} ] && [ ! -s {path} ]",
        f"touch {path}",
    )


# --- level 2: act on a file that is there -------------------------------------------------------


def copy_file(rng: random.Random) -> MiniTask:
    src = _file(rng)
    dst = _file(rng, avoid=(src,))
    body = _body(_lines(rng, 3))
    check = f"{_text_is(src, body.rstrip())} && {_text_is(dst, body.rstrip())}"
    return MiniTask("copy_file", 2, f"Copy the file {src} to {dst}.", check, f"cp {src} {dst}", {src: body})


def rename_file(rng: random.Random) -> MiniTask:
    src = _file(rng)
    dst = _file(rng, avoid=(src,))
    body = _body(_lines(rng, 2))
    return MiniTask(
        "rename_file",
        2,
        f"Rename the file {src} to {dst}.",
        f"[ ! -e {src} ] && {_text_is(dst, body.rstrip())}",
        f"mv {src} {dst}",
        {src: body},
    )


def delete_file(rng: random.Random) -> MiniTask:
    victim = _file(rng)
    keep = _file(rng, avoid=(victim,))
    return MiniTask(
        "delete_file",
        2,
        f"Delete the file {victim}.",
        f"[ ! -e {victim} ] && [ -f {keep} ]",
        f"rm {victim}",
        {victim: _body(_lines(rng, 2)), keep: _body(_lines(rng, 2))},
    )


def append_line(rng: random.Random) -> MiniTask:
    path = _file(rng)
    old = _lines(rng, 2)
    word = rng.choice([w for w in WORDS if w not in old])
    return MiniTask(
        "append_line",
        2,
        f"Append the line {word} to the file {path}.",
        _text_is(path, "\n".join([*old, word])),
        f"echo {word} >> {path}",
        {path: _body(old)},
    )


def add_numbers(rng: random.Random) -> MiniTask:
    a, b, path = rng.randint(1, 50), rng.randint(1, 50), _file(rng)
    return MiniTask(
        "add_numbers",
        2,
        f"What is {a} + {b}? Write the answer into the file {path}.",
        _text_is(path, str(a + b)),
        f"echo {a + b} > {path}",
    )


# --- level 3: a small pipeline ------------------------------------------------------------------


def count_lines(rng: random.Random) -> MiniTask:
    src = _file(rng)
    dst = _file(rng, avoid=(src,))
    lines = _lines(rng, rng.randint(2, 9))
    check = f"[ -f {dst} ] && [ \"$(tr -d ' \\n' < {dst})\" = {len(lines)} ]"
    return MiniTask(
        "count_lines",
        3,
        f"Count the lines in {src} and write the number into {dst}.",
        check,
        f"wc -l < {src} > {dst}",
        {src: _body(lines)},
    )


def first_line(rng: random.Random) -> MiniTask:
    src = _file(rng)
    dst = _file(rng, avoid=(src,))
    lines = _lines(rng, 4)
    return MiniTask(
        "first_line",
        3,
        f"Write the first line of {src} into {dst}.",
        _text_is(dst, lines[0]),
        f"head -n 1 {src} > {dst}",
        {src: _body(lines)},
    )


def sort_lines(rng: random.Random) -> MiniTask:
    src = _file(rng)
    dst = _file(rng, avoid=(src,))
    lines = _lines(rng, 5)
    return MiniTask(
        "sort_lines",
        3,
        f"Sort the lines of {src} alphabetically and write them into {dst}.",
        _text_is(dst, "\n".join(sorted(lines))),
        f"sort {src} > {dst}",
        {src: _body(lines)},
    )


def grep_word(rng: random.Random) -> MiniTask:
    src = _file(rng)
    dst = _file(rng, avoid=(src,))
    word = rng.choice(("red", "blue", "cat", "dog", "sun"))
    pool = [f"{w} {word}" for w in rng.sample(WORDS, 3)] + rng.sample(WORDS, 3)
    rng.shuffle(pool)
    keep = [line for line in pool if word in line.split()]
    return MiniTask(
        "grep_word",
        3,
        f"Write the lines of {src} that contain the word {word} into {dst}.",
        _text_is(dst, "\n".join(keep)),
        f"grep -w {word} {src} > {dst}",
        {src: _body(pool)},
    )


def upper_case(rng: random.Random) -> MiniTask:
    src = _file(rng)
    dst = _file(rng, avoid=(src,))
    lines = _lines(rng, 2)
    return MiniTask(
        "upper_case",
        3,
        f"Write the text of {src} in upper case into {dst}.",
        _text_is(dst, "\n".join(lines).upper()),
        f"tr a-z A-Z < {src} > {dst}",
        {src: _body(lines)},
    )


FAMILIES: dict[str, Callable[[random.Random], MiniTask]] = {
    f.__name__: f
    for f in (
        write_word,
        write_number,
        make_dir,
        empty_file,
        copy_file,
        rename_file,
        delete_file,
        append_line,
        add_numbers,
        count_lines,
        first_line,
        sort_lines,
        grep_word,
        upper_case,
    )
}
