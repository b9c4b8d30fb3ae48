"""Prints the project's runtime requirements (pyproject.toml), one per line, for an image's dependency layer.

    python requirements.py pyproject.toml [--without torch,transformers,...] [--only torch]

The images install their dependencies from this list before copying the sources, so a change to
the code rebuilds one small layer, not the dependencies; `--without` leaves out what an image
never imports (the store and orchestrator run without torch). Standard library only: it runs in
the bare base image.
"""

import argparse
import re
import tomllib


def requirements(pyproject: str, without: set[str], only: set[str] | None = None) -> list[str]:
    with open(pyproject, "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    names = [(d, re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower()) for d in deps]
    return [d for d, name in names if name not in without and (only is None or name in only)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject")
    parser.add_argument("--without", default="", help="comma-separated distribution names to leave out")
    parser.add_argument("--only", default="", help="comma-separated distribution names to keep alone")
    args = parser.parse_args()
    without, only = _names(args.without), _names(args.only)
    print("\n".join(requirements(args.pyproject, without, only or None)))


def _names(text: str) -> set[str]:
    return {name.strip().lower() for name in text.split(",") if name.strip()}


if __name__ == "__main__":
    main()
