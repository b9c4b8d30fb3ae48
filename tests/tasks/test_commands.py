"""A shell solution's programs, flags and answer shape (what held-out reporting compares)."""

from clawgym.tasks.commands import command_parts


def test_shape_keeps_programs_flags_and_operators_and_hides_every_name():
    parts = command_parts("#!/usr/bin/env bash\nset -e\n# copy it\ncp -r src/a 'dest dir' && ls > out.txt\n")
    assert parts.shape == (("cp", "-r", "ARG", "ARG", "&&", "ls", ">", "ARG"),)
    assert parts.programs == {"cp", "ls"} and parts.flags == {"-r"}
    assert command_parts("cp -r x y && ls > z").shape == parts.shape, "names differ, the answer is the same"


def test_pipes_assignments_and_lines_each_start_a_program():
    parts = command_parts("N=3 sort -u in.txt | head -n $N > out\ntac a > b")
    assert parts.programs == {"sort", "head", "tac"} and parts.flags == {"-u", "-n"}
    assert parts.shape == (
        ("VAR=ARG", "sort", "-u", "ARG", "|", "head", "-n", "ARG", ">", "ARG"),
        ("tac", "ARG", ">", "ARG"),
    )


def test_an_unclosed_quote_keeps_what_was_read():
    parts = command_parts("echo 'never closed\nmkdir d")
    assert "mkdir" in parts.programs and parts.shape[-1] == ("mkdir", "ARG")
