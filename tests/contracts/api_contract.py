"""Checks that every name and call clawgym makes into a third-party package exists as used.

Runs in the environment of the package checked (the vLLM venv that build_vllm_venv.sh makes, or
the main venv for torch), with the standard library only: clawgym's modules are read as source
(AST), never imported, except the vLLM worker extension, whose names vLLM itself checks.

What counts as a use, found in the source of each module a target lists:
- `from pkg.mod import Name` (anywhere, lazy imports included): `pkg.mod.Name` must exist;
- a call through such a name, `Name(…)`, `Name.attr(…)` or `module_alias.attr(…)`: the callee must
  accept that many positional arguments and those keywords (TypedDicts: the keys);
- an attribute read through it (`RequestOutputKind.DELTA`);
- calls and reads on the objects a module's `VLLM_TYPES` table types (`{"self._llm":
  "vllm.v1.engine.async_llm.AsyncLLM"}`): the method's signature, or an attribute of the class
  or one its `__init__` chain assigns;
- `collective_rpc("method", …)`: a method of the worker extension, whose names must not collide
  with vLLM's worker (vLLM refuses the extension otherwise).
A name added to those modules is checked with no change here.

    python tests/contracts/api_contract.py vllm|torch [--sabotage MODULE:ATTR[:drop=PARAM]]…

prints one JSON object {"checked": N, "problems": [...]} and exits 1 when there are problems.
`--sabotage` breaks the installed package first (deletes ATTR, or rebuilds the callable without
PARAM), so the tests can show that a rename is caught.
"""

import argparse
import ast
import importlib
import inspect
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKER_EXTENSION = ("clawgym.inference.vllm_worker", "WeightSyncExtension")


@dataclass
class Target:
    package: str
    sources: list[str]
    extra: list[str] = field(default_factory=list)  # "module:attr" used on clawgym's behalf


TARGETS = {
    "vllm": Target(
        "vllm",
        ["libs/clawgym/inference/vllm_engine.py", "libs/clawgym/inference/vllm_worker.py"],
        # vLLM mixes the extension into this worker class, and resolves it from this engine arg.
        ["vllm.v1.worker.gpu_worker:Worker", "vllm.v1.worker.worker_base:WorkerWrapperBase.init_worker"],
    ),
    "torch": Target(
        "torch",
        [
            "libs/clawgym/trainer/distributed.py",
            "libs/clawgym/rl/packing.py",
            "libs/clawgym/inference/vllm_worker.py",
        ],
        # transformers calls flex_attention with the BlockMask clawgym builds.
        ["torch.nn.attention.flex_attention:flex_attention"],
    ),
}


def resolve(dotted: str) -> Any:
    """`pkg.mod.Name.attr` → the object: the longest importable module prefix, then getattr."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module in {dotted}")


def accepts(obj: Any, n_positional: int, keywords: list[str]) -> str | None:
    """Why `obj(*n_positional, **keywords)` would be refused by its signature; None if it would not."""
    annotations = getattr(obj, "__annotations__", None)
    if isinstance(obj, type) and hasattr(obj, "__total__") and annotations is not None:  # a TypedDict
        unknown = [k for k in keywords if k not in annotations]
        return f"no keys {unknown}" if unknown else None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: existence is all that can be checked
    try:
        sig.bind_partial(*([None] * n_positional), **dict.fromkeys(keywords))
    except TypeError as e:
        return f"signature {sig} refuses it: {e}"
    return None


def instance_attribute(cls: type, name: str) -> bool:
    """A class attribute, a dataclass/msgspec field, or `self.name =` in a method of its MRO."""
    if hasattr(cls, name) or name in getattr(cls, "__struct_fields__", ()):
        return True
    pattern = re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=[^=]")
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            return True
        try:
            if pattern.search(inspect.getsource(klass)):
                return True
        except (OSError, TypeError):
            continue
    return False


def dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class Uses(ast.NodeVisitor):
    """Collects (what, where, check) for one module's uses of `package`."""

    def __init__(self, package: str, path: str, tree: ast.Module):
        self.package, self.path = package, path
        self.bindings: dict[str, str] = {}  # local name → dotted path in the package
        self.types: dict[str, str] = {}  # VLLM_TYPES: expression → class path
        self.found: list[tuple[str, int, str, Any]] = []
        self.dict_keys: dict[str, list[str]] = {}  # `options = {"mesh": …}`, passed on as **options
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Dict)
                and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys)
            ):
                self.dict_keys[node.targets[0].id] = [k.value for k in node.value.keys]  # type: ignore[union-attr]
            if isinstance(node, ast.Assign) and any(dotted_name(t) == "VLLM_TYPES" for t in node.targets):
                table = ast.literal_eval(node.value)
                self.types = {k: v for k, v in table.items() if v.split(".")[0] == package}
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
                for alias in node.names:
                    self.bindings[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    self.found.append(("import", node.lineno, f"{node.module}.{alias.name}", None))
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package:
                        self.bindings[alias.asname or alias.name.split(".")[0]] = (
                            alias.name if alias.asname else alias.name.split(".")[0]
                        )
        self.calls: set[int] = set()
        self.visit(tree)

    def _target(self, expr: str) -> tuple[str, str] | None:
        """("module", dotted path) through an import, ("instance", class:attr) through VLLM_TYPES."""
        for handle, cls in self.types.items():
            if expr.startswith(handle + ".") and "." not in expr[len(handle) + 1 :]:
                return "instance", f"{cls}:{expr[len(handle) + 1 :]}"
        head, _, rest = expr.partition(".")
        if head in self.bindings:
            return "module", self.bindings[head] + (f".{rest}" if rest else "")
        return None

    def visit_Call(self, node: ast.Call) -> None:
        expr = dotted_name(node.func)
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        for k in node.keywords:
            if k.arg is None and isinstance(k.value, ast.Name) and k.value.id in self.dict_keys:
                keywords += self.dict_keys[k.value.id]
            elif k.arg is None:
                starred = True  # keywords not known from the source: existence only
        if expr and (target := self._target(expr)):
            check = None if starred else (len(node.args), keywords)
            self.found.append((target[0], node.lineno, target[1], check))
            self.calls.add(id(node.func))
            if expr.endswith(".collective_rpc") and node.args and isinstance(node.args[0], ast.Constant):
                self.found.append(("rpc", node.lineno, node.args[0].value, None))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        expr = dotted_name(node)
        target = self._target(expr) if expr and isinstance(node.ctx, ast.Load) else None
        if target and id(node) not in self.calls:
            self.found.append((target[0], node.lineno, target[1], None))
        self.generic_visit(node)


def check_use(kind: str, what: str, check: Any) -> str | None:
    try:
        if kind == "instance":
            cls_path, attr = what.split(":")
            cls = resolve(cls_path)
            if check is None:
                return None if instance_attribute(cls, attr) else f"{cls_path} has no attribute {attr}"
            obj = getattr(cls, attr)
        elif kind == "rpc":
            ext = getattr(importlib.import_module(WORKER_EXTENSION[0]), WORKER_EXTENSION[1])
            return (
                None if callable(getattr(ext, what, None)) else f"collective_rpc names {what!r}, not a method"
            )
        else:
            obj = resolve(what.replace(":", "."))
    except (ImportError, AttributeError) as e:
        return f"{what}: {type(e).__name__}: {e}"
    if check is not None:
        why = accepts(obj, *check)
        if why:
            return f"{what}: {why}"
    return None


def extension_problems() -> list[str]:
    """vLLM's own rule (WorkerWrapperBase.init_worker): no extension name may exist on the worker."""
    sys.path.insert(0, str(ROOT / "libs"))
    ext = getattr(importlib.import_module(WORKER_EXTENSION[0]), WORKER_EXTENSION[1])
    worker = resolve("vllm.v1.worker.gpu_worker.Worker")
    clashes = [a for a in dir(ext) if not a.startswith("__") and hasattr(worker, a)]
    problems = [f"worker extension names clash with vLLM's Worker: {clashes}"] if clashes else []
    init = inspect.getsource(resolve("vllm.v1.worker.worker_base.WorkerWrapperBase.init_worker"))
    if "worker_extension_cls" not in init or "__bases__" not in init:
        problems.append("WorkerWrapperBase.init_worker no longer mixes worker_extension_cls into the worker")
    return problems


def run(name: str) -> dict[str, Any]:
    target = TARGETS[name]
    problems: list[str] = []
    checked = 0
    for rel in target.sources:
        uses = Uses(target.package, rel, ast.parse((ROOT / rel).read_text()))
        for kind, line, what, check in uses.found:
            checked += 1
            if why := check_use(kind, what, check):
                problems.append(f"{rel}:{line}: {why}")
    for what in target.extra:
        checked += 1
        if why := check_use("module", what, None):
            problems.append(f"(used on clawgym's behalf) {why}")
    if name == "vllm":
        checked += 1
        problems += extension_problems()
    return {"target": name, "checked": checked, "problems": problems}


def sabotage(spec: str) -> None:
    """MODULE:ATTR deletes the attribute; MODULE:ATTR:drop=PARAM rebuilds the callable without PARAM."""
    module, attr, *how = spec.split(":")
    owner_path, _, name = f"{module}.{attr}".rpartition(".")
    owner = resolve(owner_path)
    if not how:
        delattr(owner, name)
        return
    param = how[0].removeprefix("drop=")
    original = getattr(owner, name)
    sig = inspect.signature(original)

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    stand_in.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != param])  # type: ignore[attr-defined]
    setattr(owner, name, stand_in)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("--sabotage", action="append", default=[])
    args = parser.parse_args()
    for spec in args.sabotage:
        sabotage(spec)
    result = run(args.target)
    print(json.dumps(result, indent=1))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
