"""The task families of the bundled mini suite: small shell chores a 135M model can learn.

Each family turns a seeded `random.Random` into one `MiniTask`: the instruction (one of several
phrasings), the input files, the reference solution, and a reward check written in bash. Levels:

1. the instruction names everything; nothing is there to start (`echo`, `mkdir`, `touch`);
2. one command on a file or folder that is there (`cp`, `mv`, `rm`, `chmod`, `head`, `cat`);
3. read and transform content (`sort`, `grep`, `tr`, `wc`, `tac`).

Names come from large vocabularies, and some files sit in a sub-folder, so a policy has to read
the paths the instruction gives rather than remember a template's. Every check fails on an
untouched workspace, so the nop harness never passes. This module only builds data; `generate`
writes it to disk and decides which families are held out of training.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

WORDS = tuple(
    [
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
        "anchor",
        "bamboo",
        "basket",
        "beacon",
        "breeze",
        "bridge",
        "butter",
        "cactus",
        "canyon",
        "carpet",
        "castle",
        "cherry",
        "circle",
        "cobalt",
        "comet",
        "copper",
        "coral",
        "cotton",
        "crystal",
        "desert",
        "dragon",
        "engine",
        "falcon",
        "feather",
        "fossil",
        "galaxy",
        "ginger",
        "glacier",
        "hammer",
        "harbor",
        "helmet",
        "hollow",
        "horizon",
        "iceberg",
        "jacket",
        "jasmine",
        "kettle",
        "ladder",
        "lantern",
        "lizard",
        "magnet",
        "marble",
        "meadow",
        "mirror",
        "monkey",
        "needle",
        "orange",
        "orchid",
        "paddle",
        "parrot",
        "pebble",
        "pencil",
        "pillow",
        "pirate",
        "pocket",
        "puzzle",
        "rabbit",
        "ribbon",
        "saddle",
        "salmon",
        "shadow",
        "sketch",
        "spider",
        "spiral",
        "sponge",
        "stream",
        "summer",
        "sunset",
        "tablet",
        "thunder",
        "timber",
        "tomato",
        "tunnel",
        "turtle",
        "valley",
        "velvet",
        "violet",
        "walnut",
        "wizard",
        "winter",
        "zebra",
        "acorn",
        "badger",
        "blossom",
        "bucket",
        "button",
        "cinnamon",
        "daisy",
        "dolphin",
        "emerald",
        "falafel",
        "garlic",
        "hazel",
        "igloo",
        "kayak",
        "koala",
        "mango",
        "muffin",
        "noodle",
        "olive",
        "panda",
        "peanut",
        "quartz",
        "radish",
        "sapphire",
        "tulip",
        "umbrella",
        "vanilla",
        "walrus",
        "yogurt",
    ]
)
STEMS = tuple(
    [
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
        "memo",
        "config",
        "inventory",
        "agenda",
        "budget",
        "diary",
        "journal",
        "ledger",
        "manifest",
        "minutes",
        "plan",
        "recipe",
        "roster",
        "schedule",
        "scores",
        "sketch",
        "status",
        "tasks",
        "tickets",
        "update",
        "verdict",
        "weather",
        "catalog",
        "changes",
        "checklist",
        "contacts",
        "digest",
        "errors",
        "events",
        "fruits",
        "guests",
        "ideas",
        "inbox",
        "labels",
        "lines",
        "orders",
        "quotes",
        "readme",
        "records",
        "results",
        "samples",
        "sheet",
        "stock",
        "topics",
        "totals",
        "values",
        "visitors",
    ]
)
DIRS = tuple(
    [
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
        "projects",
        "shared",
        "staging",
        "release",
        "notebooks",
        "recipes",
        "invoices",
        "templates",
        "plugins",
        "fixtures",
        "lessons",
        "maps",
        "snapshots",
        "tools",
        "widgets",
    ]
)
EXTENSIONS = ("txt", "md", "log", "csv", "dat")
MARKS = ("red", "blue", "cat", "dog", "sun", "star", "moon", "fish", "tree", "bird")


@dataclass(frozen=True)
class MiniTask:
    """One generated task, before it is written in the ClawGym format."""

    family: str
    level: int
    instruction: str
    check: str  # bash; exit status 0 = solved
    solution: str  # bash, run in the workspace
    inputs: dict[str, str] = field(default_factory=dict)  # path → content; a path ending in / is a folder


# --- building blocks ----------------------------------------------------------------------------


def _name(rng: random.Random, avoid: tuple[str, ...] = ()) -> str:
    """A file name at the top of the workspace, not one of `avoid`."""
    while True:
        name = f"{rng.choice(STEMS)}.{rng.choice(EXTENSIONS)}"
        if name not in avoid:
            return name


def _path(rng: random.Random, avoid: tuple[str, ...] = (), nested: float = 0.3) -> str:
    """A file that is there: at the top, or (with probability `nested`) inside a folder."""
    name = _name(rng, avoid)
    path = f"{rng.choice(DIRS)}/{name}" if rng.random() < nested else name
    return path if path not in avoid else _path(rng, avoid, nested)


def _dirs(rng: random.Random, n: int) -> list[str]:
    return rng.sample(DIRS, n)


def _lines(rng: random.Random, n: int, avoid: tuple[str, ...] = ()) -> list[str]:
    return rng.sample([w for w in WORDS if w not in avoid], n)


def _text_is(path: str, text: str) -> str:
    """A check that `path` holds `text` (trailing newlines ignored, as `$(cat)` drops them)."""
    return f'[ -f {path} ] && [ "$(cat {path})" = {shlex.quote(text)} ]'


def _number_is(path: str, n: int) -> str:
    """A check that `path` holds the number `n` (spaces and newlines ignored, as `wc` pads)."""
    return f"[ -f {path} ] && [ \"$(tr -d ' \\n\\t' < {path})\" = {n} ]"


def _body(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def _say(rng: random.Random, phrasings: tuple[str, ...], **names: object) -> str:
    return rng.choice(phrasings).format(**names)


def _read_into(
    rng: random.Random,
    family: str,
    level: int,
    phrasings: tuple[str, ...],
    lines: list[str],
    expected: str | int,
    command: str,
    **names: object,
) -> MiniTask:
    """A task that reads a file that is there (`lines`) and writes `expected` into a new file; `{s}`
    and `{d}` in the phrasings and the command are the two paths (a number is checked as a number)."""
    src = _path(rng)
    dst = _name(rng, avoid=(src,))
    check = _number_is(dst, expected) if isinstance(expected, int) else _text_is(dst, expected)
    said = _say(rng, phrasings, s=src, d=dst, **names)
    return MiniTask(family, level, said, check, command.format(s=src, d=dst), {src: _body(lines)})


# --- level 1: the instruction names everything -------------------------------------------------


def write_word(rng: random.Random) -> MiniTask:
    path, word = _name(rng), rng.choice(WORDS)
    phrasings = (
        "Create a file named {p} containing the text {w}.",
        "Write the word {w} into the file {p}.",
        "Save the word {w} in a new file called {p}.",
        "Make a file {p} whose only content is {w}.",
    )
    return MiniTask(
        "write_word", 1, _say(rng, phrasings, p=path, w=word), _text_is(path, word), f"echo {word} > {path}"
    )


def write_number(rng: random.Random) -> MiniTask:
    path, n = _name(rng), rng.randint(2, 9999)
    phrasings = (
        "Write the number {n} into the file {p}.",
        "Create {p} containing the number {n}.",
        "Store the value {n} in a file named {p}.",
    )
    return MiniTask(
        "write_number", 1, _say(rng, phrasings, p=path, n=n), _text_is(path, str(n)), f"echo {n} > {path}"
    )


def write_phrase(rng: random.Random) -> MiniTask:
    path, words = _name(rng), _lines(rng, rng.randint(2, 3))
    phrase = " ".join(words)
    phrasings = (
        "Write the phrase '{t}' into the file {p}.",
        "Create a file {p} with the single line: {t}",
        'Put the text "{t}" in a new file named {p}.',
    )
    return MiniTask(
        "write_phrase",
        1,
        _say(rng, phrasings, p=path, t=phrase),
        _text_is(path, phrase),
        f"echo '{phrase}' > {path}",
    )


def write_two_lines(rng: random.Random) -> MiniTask:
    path, (a, b) = _name(rng), _lines(rng, 2)
    phrasings = (
        "Create a file {p} with two lines: {a} on the first line and {b} on the second.",
        "Write {a} and {b} into {p}, one per line, in that order.",
        "Make the file {p} contain the line {a} followed by the line {b}.",
    )
    return MiniTask(
        "write_two_lines",
        1,
        _say(rng, phrasings, p=path, a=a, b=b),
        _text_is(path, f"{a}\n{b}"),
        f"printf '%s\\n' {a} {b} > {path}",
    )


def write_csv_row(rng: random.Random) -> MiniTask:
    path, words = _name(rng), _lines(rng, 3)
    row = ",".join(words)
    phrasings = (
        "Write {a}, {b} and {c} as one comma-separated line (no spaces) into {p}.",
        "Create {p} holding the single line {r}",
        "Save the comma-separated values {r} in the file {p}.",
    )
    said = _say(rng, phrasings, p=path, a=words[0], b=words[1], c=words[2], r=row)
    return MiniTask("write_csv_row", 1, said, _text_is(path, row), f"echo {row} > {path}")


def make_dir(rng: random.Random) -> MiniTask:
    name = rng.choice(DIRS)
    phrasings = (
        "Make a directory named {d}.",
        "Create a folder called {d}.",
        "Create a new directory {d} in the current directory.",
    )
    return MiniTask("make_dir", 1, _say(rng, phrasings, d=name), f"[ -d {name} ]", f"mkdir {name}")


def make_nested_dirs(rng: random.Random) -> MiniTask:
    outer, inner = _dirs(rng, 2)
    phrasings = (
        "Create the directory {o}/{i} (a folder {i} inside a folder {o}).",
        "Make a folder {o} with a folder {i} inside it.",
        "Create the nested directories {o}/{i}.",
    )
    return MiniTask(
        "make_nested_dirs",
        1,
        _say(rng, phrasings, o=outer, i=inner),
        f"[ -d {outer}/{inner} ]",
        f"mkdir -p {outer}/{inner}",
    )


def make_two_dirs(rng: random.Random) -> MiniTask:
    a, b = _dirs(rng, 2)
    phrasings = (
        "Create two directories: {a} and {b}.",
        "Make the folders {a} and {b}.",
        "Create a directory {a} and a directory {b}.",
    )
    return MiniTask(
        "make_two_dirs", 1, _say(rng, phrasings, a=a, b=b), f"[ -d {a} ] && [ -d {b} ]", f"mkdir {a} {b}"
    )


def empty_file(rng: random.Random) -> MiniTask:
    path = _name(rng)
    phrasings = (
        "Create an empty file named {p}.",
        "Make a new empty file called {p}.",
        "Create the file {p} with nothing in it.",
    )
    return MiniTask(
        "empty_file", 1, _say(rng, phrasings, p=path), f"[ -f {path} ] && [ ! -s {path} ]", f"touch {path}"
    )


def two_empty_files(rng: random.Random) -> MiniTask:
    a = _name(rng)
    b = _name(rng, avoid=(a,))
    phrasings = (
        "Create two empty files, {a} and {b}.",
        "Make the empty files {a} and {b}.",
        "Create empty files named {a} and {b}.",
    )
    check = f"[ -f {a} ] && [ ! -s {a} ] && [ -f {b} ] && [ ! -s {b} ]"
    return MiniTask("two_empty_files", 1, _say(rng, phrasings, a=a, b=b), check, f"touch {a} {b}")


def file_in_new_dir(rng: random.Random) -> MiniTask:
    folder, name, word = rng.choice(DIRS), _name(rng), rng.choice(WORDS)
    path = f"{folder}/{name}"
    phrasings = (
        "Create a directory {d} and inside it a file {f} containing the word {w}.",
        "Make the folder {d}, then write {w} into {d}/{f}.",
        "Write the word {w} into the file {d}/{f}; the folder {d} does not exist yet.",
    )
    return MiniTask(
        "file_in_new_dir",
        1,
        _say(rng, phrasings, d=folder, f=name, w=word),
        _text_is(path, word),
        f"mkdir -p {folder} && echo {word} > {path}",
    )


def add_numbers(rng: random.Random) -> MiniTask:
    a, b, path = rng.randint(1, 99), rng.randint(1, 99), _name(rng)
    phrasings = (
        "What is {a} + {b}? Write the answer into the file {p}.",
        "Add {a} and {b} and save the sum in {p}.",
        "Write the sum of {a} and {b} into {p}.",
    )
    return MiniTask(
        "add_numbers",
        1,
        _say(rng, phrasings, a=a, b=b, p=path),
        _text_is(path, str(a + b)),
        f"echo {a + b} > {path}",
    )


def multiply_numbers(rng: random.Random) -> MiniTask:
    a, b, path = rng.randint(2, 12), rng.randint(2, 12), _name(rng)
    phrasings = (
        "What is {a} times {b}? Write the answer into {p}.",
        "Multiply {a} by {b} and write the result into the file {p}.",
        "Save the product of {a} and {b} in {p}.",
    )
    return MiniTask(
        "multiply_numbers",
        1,
        _say(rng, phrasings, a=a, b=b, p=path),
        _text_is(path, str(a * b)),
        f"echo {a * b} > {path}",
    )


def subtract_numbers(rng: random.Random) -> MiniTask:
    b = rng.randint(1, 50)
    a, path = b + rng.randint(1, 50), _name(rng)
    phrasings = (
        "What is {a} - {b}? Write the answer into the file {p}.",
        "Subtract {b} from {a} and save the result in {p}.",
        "Write the difference {a} minus {b} into {p}.",
    )
    return MiniTask(
        "subtract_numbers",
        1,
        _say(rng, phrasings, a=a, b=b, p=path),
        _text_is(path, str(a - b)),
        f"echo {a - b} > {path}",
    )


# --- level 2: one command on a file or folder that is there ------------------------------------


def copy_file(rng: random.Random) -> MiniTask:
    src = _path(rng)
    dst = _name(rng, avoid=(src,))
    body = _body(_lines(rng, 3))
    phrasings = ("Copy the file {s} to {d}.", "Make a copy of {s} named {d}.", "Duplicate {s} as {d}.")
    check = f"{_text_is(src, body.rstrip())} && {_text_is(dst, body.rstrip())}"
    return MiniTask("copy_file", 2, _say(rng, phrasings, s=src, d=dst), check, f"cp {src} {dst}", {src: body})


def rename_file(rng: random.Random) -> MiniTask:
    src = _name(rng)
    dst = _name(rng, avoid=(src,))
    body = _body(_lines(rng, 2))
    phrasings = (
        "Rename the file {s} to {d}.",
        "Change the name of {s} to {d}.",
        "Move {s} to the new name {d}.",
    )
    check = f"[ ! -e {src} ] && {_text_is(dst, body.rstrip())}"
    return MiniTask(
        "rename_file", 2, _say(rng, phrasings, s=src, d=dst), check, f"mv {src} {dst}", {src: body}
    )


def delete_file(rng: random.Random) -> MiniTask:
    victim = _path(rng)
    keep = _path(rng, avoid=(victim,))
    phrasings = ("Delete the file {v}.", "Remove {v}; keep every other file.", "Get rid of the file {v}.")
    return MiniTask(
        "delete_file",
        2,
        _say(rng, phrasings, v=victim),
        f"[ ! -e {victim} ] && [ -f {keep} ]",
        f"rm {victim}",
        {victim: _body(_lines(rng, 2)), keep: _body(_lines(rng, 2))},
    )


def append_line(rng: random.Random) -> MiniTask:
    path = _path(rng)
    old = _lines(rng, 2)
    word = rng.choice([w for w in WORDS if w not in old])
    phrasings = (
        "Append the line {w} to the file {p}.",
        "Add {w} as a new last line of {p}.",
        "Add the word {w} on a new line at the end of {p}, keeping what is there.",
    )
    return MiniTask(
        "append_line",
        2,
        _say(rng, phrasings, w=word, p=path),
        _text_is(path, "\n".join([*old, word])),
        f"echo {word} >> {path}",
        {path: _body(old)},
    )


def overwrite_file(rng: random.Random) -> MiniTask:
    path = _path(rng)
    old = _lines(rng, 3)
    word = rng.choice([w for w in WORDS if w not in old])
    phrasings = (
        "Replace the whole content of {p} with the single word {w}.",
        "Overwrite the file {p} so that it only contains {w}.",
        "Make {p} hold just the word {w} instead of what it has now.",
    )
    return MiniTask(
        "overwrite_file",
        2,
        _say(rng, phrasings, p=path, w=word),
        _text_is(path, word),
        f"echo {word} > {path}",
        {path: _body(old)},
    )


def copy_into_dir(rng: random.Random) -> MiniTask:
    src, folder = _name(rng), rng.choice(DIRS)
    body = _body(_lines(rng, 2))
    phrasings = (
        "Copy the file {s} into the directory {d}.",
        "Put a copy of {s} in the folder {d}.",
        "Copy {s} to {d}/, keeping the original.",
    )
    check = f"{_text_is(src, body.rstrip())} && {_text_is(f'{folder}/{src}', body.rstrip())}"
    return MiniTask(
        "copy_into_dir",
        2,
        _say(rng, phrasings, s=src, d=folder),
        check,
        f"cp {src} {folder}/",
        {src: body, f"{folder}/": ""},
    )


def move_into_dir(rng: random.Random) -> MiniTask:
    src, folder = _name(rng), rng.choice(DIRS)
    body = _body(_lines(rng, 2))
    phrasings = (
        "Move the file {s} into the directory {d}.",
        "Put {s} inside the folder {d} (move it, do not copy).",
        "Move {s} to {d}/.",
    )
    check = f"[ ! -e {src} ] && {_text_is(f'{folder}/{src}', body.rstrip())}"
    return MiniTask(
        "move_into_dir",
        2,
        _say(rng, phrasings, s=src, d=folder),
        check,
        f"mv {src} {folder}/",
        {src: body, f"{folder}/": ""},
    )


def delete_dir(rng: random.Random) -> MiniTask:
    victim, keep = _dirs(rng, 2)
    inner = _name(rng)
    phrasings = (
        "Delete the directory {v} and everything in it.",
        "Remove the folder {v} together with its files.",
        "Get rid of the {v} directory, contents included.",
    )
    return MiniTask(
        "delete_dir",
        2,
        _say(rng, phrasings, v=victim),
        f"[ ! -e {victim} ] && [ -d {keep} ]",
        f"rm -r {victim}",
        {f"{victim}/{inner}": _body(_lines(rng, 2)), f"{keep}/{_name(rng)}": _body(_lines(rng, 1))},
    )


def remove_empty_dir(rng: random.Random) -> MiniTask:
    victim, keep = _dirs(rng, 2)
    phrasings = (
        "Remove the empty directory {v}.",
        "Delete the empty folder {v}.",
        "The folder {v} is empty: remove it.",
    )
    return MiniTask(
        "remove_empty_dir",
        2,
        _say(rng, phrasings, v=victim),
        f"[ ! -e {victim} ] && [ -d {keep} ]",
        f"rmdir {victim}",
        {f"{victim}/": "", f"{keep}/": ""},
    )


def copy_dir(rng: random.Random) -> MiniTask:
    src, dst = _dirs(rng, 2)
    name = _name(rng)
    body = _body(_lines(rng, 2))
    phrasings = (
        "Copy the directory {s} with all its files to a new directory {d}.",
        "Make a copy of the folder {s} called {d}.",
        "Duplicate the folder {s} as {d}, contents included.",
    )
    check = f"{_text_is(f'{src}/{name}', body.rstrip())} && {_text_is(f'{dst}/{name}', body.rstrip())}"
    return MiniTask(
        "copy_dir",
        2,
        _say(rng, phrasings, s=src, d=dst),
        check,
        f"cp -r {src} {dst}",
        {f"{src}/{name}": body},
    )


def rename_dir(rng: random.Random) -> MiniTask:
    src, dst = _dirs(rng, 2)
    name = _name(rng)
    body = _body(_lines(rng, 2))
    phrasings = (
        "Rename the directory {s} to {d}.",
        "Change the folder name {s} to {d}.",
        "Rename the folder {s} as {d}.",
    )
    check = f"[ ! -e {src} ] && {_text_is(f'{dst}/{name}', body.rstrip())}"
    return MiniTask(
        "rename_dir", 2, _say(rng, phrasings, s=src, d=dst), check, f"mv {src} {dst}", {f"{src}/{name}": body}
    )


def make_executable(rng: random.Random) -> MiniTask:
    path = f"{rng.choice(STEMS)}.sh"
    phrasings = (
        "Make the script {p} executable.",
        "Give the file {p} execute permission.",
        "Allow {p} to be run as a program (set its executable bit).",
    )
    body = f"#!/bin/sh\necho {rng.choice(WORDS)}\n"
    return MiniTask(
        "make_executable", 2, _say(rng, phrasings, p=path), f"[ -x {path} ]", f"chmod +x {path}", {path: body}
    )


def empty_existing_file(rng: random.Random) -> MiniTask:
    path = _path(rng)
    phrasings = (
        "Empty the file {p}: keep the file but remove all of its content.",
        "Clear the contents of {p} (the file must stay, with size zero).",
        "Truncate {p} to zero bytes.",
    )
    return MiniTask(
        "empty_existing_file",
        2,
        _say(rng, phrasings, p=path),
        f"[ -f {path} ] && [ ! -s {path} ]",
        f"truncate -s 0 {path}",
        {path: _body(_lines(rng, 3))},
    )


def symlink(rng: random.Random) -> MiniTask:
    target = _name(rng)
    link = _name(rng, avoid=(target,))
    phrasings = (
        "Create a symbolic link named {l} that points to {t}.",
        "Make {l} a symlink to the file {t}.",
        "Add a soft link {l} pointing at {t}.",
    )
    return MiniTask(
        "symlink",
        2,
        _say(rng, phrasings, l=link, t=target),
        f'[ -L {link} ] && [ "$(readlink {link})" = {target} ]',
        f"ln -s {target} {link}",
        {target: _body(_lines(rng, 2))},
    )


def concat_files(rng: random.Random) -> MiniTask:
    a = _name(rng)
    b = _name(rng, avoid=(a,))
    out = _name(rng, avoid=(a, b))
    la, lb = _lines(rng, 2), _lines(rng, 2)
    phrasings = (
        "Join the files {a} and {b}, in that order, into a new file {o}.",
        "Concatenate {a} and {b} into {o}.",
        "Write the content of {a} followed by the content of {b} into {o}.",
    )
    return MiniTask(
        "concat_files",
        2,
        _say(rng, phrasings, a=a, b=b, o=out),
        _text_is(out, "\n".join(la + lb)),
        f"cat {a} {b} > {out}",
        {a: _body(la), b: _body(lb)},
    )


def delete_by_extension(rng: random.Random) -> MiniTask:
    folder = rng.choice(DIRS)
    ext, other = rng.sample(EXTENSIONS, 2)
    stems = rng.sample(STEMS, 4)
    victims = [f"{folder}/{s}.{ext}" for s in stems[:2]]
    keeps = [f"{folder}/{s}.{other}" for s in stems[2:]]
    phrasings = (
        "Delete every .{e} file in the folder {d}; leave the other files alone.",
        "Remove all files ending in .{e} from the directory {d}.",
        "Get rid of the .{e} files in {d} and keep the rest.",
    )
    check = " && ".join([*(f"[ ! -e {v} ]" for v in victims), *(f"[ -f {k} ]" for k in keeps)])
    inputs = {name: _body(_lines(rng, 1)) for name in victims + keeps}
    return MiniTask(
        "delete_by_extension", 2, _say(rng, phrasings, e=ext, d=folder), check, f"rm {folder}/*.{ext}", inputs
    )


def first_line(rng: random.Random) -> MiniTask:
    lines = _lines(rng, 4)
    phrasings = (
        "Write the first line of {s} into {d}.",
        "Save the first line of the file {s} in a new file {d}.",
        "Put only the top line of {s} into {d}.",
    )
    return _read_into(rng, "first_line", 2, phrasings, lines, lines[0], "head -n 1 {s} > {d}")


def replace_word(rng: random.Random) -> MiniTask:
    path = _path(rng)
    lines = _lines(rng, 3)
    old = lines[1]
    if any(old in other for other in (lines[0], lines[2])):  # sed would edit the wrong line first
        return replace_word(rng)
    new = rng.choice([w for w in WORDS if w not in lines])
    phrasings = (
        "In the file {p}, replace the word {o} with {n}.",
        "Change {o} to {n} in {p}, editing the file in place.",
        "Edit {p} so that the line {o} reads {n} instead.",
    )
    after = [lines[0], new, lines[2]]
    return MiniTask(
        "replace_word",
        2,
        _say(rng, phrasings, p=path, o=old, n=new),
        _text_is(path, "\n".join(after)),
        f"sed -i 's/{old}/{new}/' {path}",
        {path: _body(lines)},
    )


# --- level 3: read and transform content --------------------------------------------------------


def count_lines(rng: random.Random) -> MiniTask:
    lines = _lines(rng, rng.randint(2, 9))
    phrasings = (
        "Count the lines in {s} and write the number into {d}.",
        "How many lines does {s} have? Write the number into {d}.",
    )
    return _read_into(rng, "count_lines", 3, phrasings, lines, len(lines), "wc -l < {s} > {d}")


def count_words(rng: random.Random) -> MiniTask:
    lines = [" ".join(_lines(rng, rng.randint(1, 4))) for _ in range(rng.randint(2, 4))]
    phrasings = (
        "Count the words in {s} and write the number into {d}.",
        "How many words are in {s}? Save the count in {d}.",
    )
    n = sum(len(line.split()) for line in lines)
    return _read_into(rng, "count_words", 3, phrasings, lines, n, "wc -w < {s} > {d}")


def last_line(rng: random.Random) -> MiniTask:
    lines = _lines(rng, 4)
    phrasings = ("Write the last line of {s} into {d}.", "Save the final line of the file {s} in {d}.")
    return _read_into(rng, "last_line", 3, phrasings, lines, lines[-1], "tail -n 1 {s} > {d}")


def sort_lines(rng: random.Random) -> MiniTask:
    lines = _lines(rng, 5)
    phrasings = (
        "Sort the lines of {s} alphabetically and write them into {d}.",
        "Write the lines of {s} in alphabetical order into {d}.",
    )
    return _read_into(rng, "sort_lines", 3, phrasings, lines, "\n".join(sorted(lines)), "sort {s} > {d}")


def reverse_lines(rng: random.Random) -> MiniTask:
    lines = _lines(rng, 4)
    phrasings = (
        "Write the lines of {s} in reverse order (last line first) into {d}.",
        "Reverse the order of the lines of {s} and save the result in {d}.",
    )
    return _read_into(rng, "reverse_lines", 3, phrasings, lines, "\n".join(reversed(lines)), "tac {s} > {d}")


def grep_word(rng: random.Random) -> MiniTask:
    word = rng.choice(MARKS)
    pool = [f"{w} {word}" for w in rng.sample(WORDS, 3)] + rng.sample(WORDS, 3)
    rng.shuffle(pool)
    keep = [line for line in pool if word in line.split()]
    phrasings = (
        "Write the lines of {s} that contain the word {w} into {d}.",
        "Save every line of {s} mentioning {w} in {d}.",
    )
    return _read_into(
        rng, "grep_word", 3, phrasings, pool, "\n".join(keep), f"grep -w {word} {{s}} > {{d}}", w=word
    )


def upper_case(rng: random.Random) -> MiniTask:
    lines = _lines(rng, 2)
    phrasings = (
        "Write the text of {s} in upper case into {d}.",
        "Convert the content of {s} to capital letters and save it in {d}.",
    )
    return _read_into(
        rng, "upper_case", 3, phrasings, lines, "\n".join(lines).upper(), "tr a-z A-Z < {s} > {d}"
    )


def unique_lines(rng: random.Random) -> MiniTask:
    words = _lines(rng, 3)
    lines = words + rng.sample(words, 2)
    rng.shuffle(lines)
    phrasings = (
        "Write the distinct lines of {s}, sorted and without duplicates, into {d}.",
        "Save the sorted unique lines of {s} in {d}.",
    )
    return _read_into(rng, "unique_lines", 3, phrasings, lines, "\n".join(sorted(words)), "sort -u {s} > {d}")


FAMILIES: dict[str, Callable[[random.Random], MiniTask]] = {
    f.__name__: f
    for f in (
        write_word,
        write_number,
        write_phrase,
        write_two_lines,
        write_csv_row,
        make_dir,
        make_nested_dirs,
        make_two_dirs,
        empty_file,
        two_empty_files,
        file_in_new_dir,
        add_numbers,
        multiply_numbers,
        subtract_numbers,
        copy_file,
        rename_file,
        delete_file,
        append_line,
        overwrite_file,
        copy_into_dir,
        move_into_dir,
        delete_dir,
        remove_empty_dir,
        copy_dir,
        rename_dir,
        make_executable,
        empty_existing_file,
        symlink,
        concat_files,
        delete_by_extension,
        first_line,
        replace_word,
        count_lines,
        count_words,
        last_line,
        sort_lines,
        reverse_lines,
        grep_word,
        upper_case,
        unique_lines,
    )
}
