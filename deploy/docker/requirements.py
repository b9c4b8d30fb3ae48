"""Prints the project's runtime requirements (pyproject.toml), one per line, for an image's dependency layer.

    python requirements.py pyproject.toml [--without torch,transformers,...]

The images install their dependencies from this list before copying the sources, so a change to
the code rebuilds one small layer, not the dependencies; `--without` leaves out what an image
never imports (the store and orchestrator run without torch). Standard library only: it runs in
the bare base image.
"""

import argparse
import re
import tomllib


def requirements(pyproject: str, without: set[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return [d for d in deps if re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower() not in without]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject")
    parser.add_argument("--without", default="", help="comma-separated distribution names to leave out")
    args = parser.parse_args()
    without = {name.strip().lower() for name in args.without.split(",") if name.strip()}
    print("\n".join(requirements(args.pyproject, without)))


if __name__ == "__main__":
    main()
