"""Regenerates the Python gRPC stubs of proto/clawgym/v1 into libs/clawgym/generated/v1.

    python proto/generate.py          # write the stubs
    python proto/generate.py --check  # exit 1 if the committed stubs are stale (CI)

protoc names a module after its .proto path (`clawgym.v1.store_pb2`); the stubs live in
`clawgym.generated.v1` so that a reader sees they are generated, so their imports of each other
are rewritten to that package. The wire names (`clawgym.v1.Store`, ...) stay the proto's.
"""

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "libs"
PROTO_PACKAGE = Path("clawgym") / "v1"
PACKAGE = Path("clawgym") / "generated" / "v1"
INIT = '"""Generated gRPC stubs (proto/generate.py). Never edit by hand."""\n'
PARENT_INIT = '"""Code generated from proto/ (proto/generate.py); never edited by hand."""\n'


def generate(out: Path) -> list[Path]:
    """Runs protoc on every .proto into `out`/PACKAGE; returns the generated files relative to `out`."""
    protos = sorted((PROTO_DIR / PROTO_PACKAGE).glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as raw:
        args = [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            *[str(p.relative_to(PROTO_DIR)) for p in protos],
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        target = out / PACKAGE
        target.mkdir(parents=True, exist_ok=True)
        for src in (Path(raw) / PROTO_PACKAGE).iterdir():
            text = src.read_text().replace("from clawgym.v1 import", "from clawgym.generated.v1 import")
            (target / src.name).write_text(text)
    (target / "__init__.py").write_text(INIT)
    (target.parent / "__init__.py").write_text(PARENT_INIT)
    return sorted(p.relative_to(out) for p in target.iterdir() if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs differ")
    args = parser.parse_args()
    if not args.check:
        target = OUT_DIR / PACKAGE
        for old in target.glob("*_pb2*.py*"):
            old.unlink()
        files = generate(OUT_DIR)
        print(f"wrote {len(files)} files into {target.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        committed = sorted(p.relative_to(OUT_DIR) for p in (OUT_DIR / PACKAGE).iterdir() if p.is_file())
        stale = [str(f) for f in fresh if not (OUT_DIR / f).exists() or not filecmp.cmp(Path(tmp) / f, OUT_DIR / f, shallow=False)]
        extra = [str(f) for f in committed if f not in fresh]
    if stale or extra:
        print(f"gRPC stubs are stale: {stale + extra}; run: python proto/generate.py", file=sys.stderr)
        return 1
    print("gRPC stubs are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
