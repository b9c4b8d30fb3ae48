"""Reading a weights checkpoint (an HF safetensors folder, local path or fsspec URI) and checking it fits a model.

Owns "may this checkpoint be read" (`within_root`: only under the configured checkpoint root) and
"does this checkpoint fit": every tensor name known, none missing, every shape equal. It does not
swap weights into a running engine; the engines do that between decode steps.
"""

import os
from pathlib import PurePosixPath

import fsspec
import torch
from safetensors.torch import load, load_file

from clawgym.errors import FailedPrecondition, InvalidArgument, PermissionDenied


def within_root(uri: str, root: str) -> str:
    """`uri` as it is to be read, if it lies under `root`; else PermissionDenied (InvalidArgument if malformed).

    A local `root` (a folder, or file://) admits local paths whose real path (symlinks and `..`
    resolved) is inside it; the resolved path is returned, so what is read is what was checked.
    A remote `root` (s3://bucket/prefix, https://host/prefix) admits URIs of the same scheme and
    host under its prefix, with no `.` or `..` segment (a server may resolve those its own way).
    """
    if not root:
        raise PermissionDenied("LoadWeights is disabled: inference.checkpoint_root is not set")
    if not uri or "\x00" in uri:
        raise InvalidArgument(f"checkpoint URI {uri!r} is empty or malformed")
    uri_scheme, uri_path = _split(uri)
    root_scheme, root_path = _split(root)
    if uri_scheme != root_scheme:
        raise PermissionDenied(f"checkpoint {uri!r} is not under the checkpoint root {root!r}")
    if uri_scheme == "file":
        real, real_root = os.path.realpath(uri_path), os.path.realpath(root_path)
        if os.path.commonpath([real, real_root]) != real_root:
            raise PermissionDenied(f"checkpoint {uri!r} resolves outside the checkpoint root {root!r}")
        return real
    if any(part in (".", "..") for part in uri_path.split("/")):
        raise InvalidArgument(f"checkpoint URI {uri!r} has a '.' or '..' segment")
    prefix = root_path.rstrip("/") + "/"
    if not (uri_path.rstrip("/") + "/").startswith(prefix):
        raise PermissionDenied(f"checkpoint {uri!r} is not under the checkpoint root {root!r}")
    return uri


def _split(uri: str) -> tuple[str, str]:
    """(scheme, rest) of a URI; a plain path is ("file", path)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return "file", uri
    return scheme.lower(), rest


def read_safetensors(uri: str) -> dict[str, torch.Tensor]:
    """All tensors of the `*.safetensors` files in the folder at `uri`; FailedPrecondition if none or unreadable."""
    try:
        fs, root = fsspec.core.url_to_fs(uri)
        files = sorted(p for p in fs.ls(root, detail=False) if str(p).endswith(".safetensors"))
    except (OSError, ValueError) as e:
        raise FailedPrecondition(f"cannot list checkpoint {uri!r}: {e}") from e
    if not files:
        raise FailedPrecondition(f"checkpoint {uri!r} has no *.safetensors files")
    local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            # Local files are memory-mapped by safetensors; remote ones are read whole.
            part = load_file(path) if local else load(fs.cat_file(path))
        except Exception as e:  # safetensors raises its own error types for corrupt headers
            raise FailedPrecondition(f"cannot read {PurePosixPath(path).name} of {uri!r}: {e}") from e
        tensors.update(part)
    return tensors


def weight_targets(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], set[str]]:
    """The model's persistent tensors by checkpoint name, and the names that alias another (tied weights)."""
    targets: dict[str, torch.Tensor] = {}
    aliases: set[str] = set()
    seen: dict[int, str] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        ptr = tensor.data_ptr()
        if ptr in seen:
            aliases.add(
                name
            )  # e.g. lm_head.weight tied to model.embed_tokens.weight: save_pretrained drops it
            continue
        seen[ptr] = name
        targets[name] = tensor
    return targets, aliases


def fit_checkpoint(
    tensors: dict[str, torch.Tensor],
    targets: dict[str, torch.Tensor],
    aliases: set[str],
    uri: str,
    copy: bool = True,
) -> dict[str, torch.Tensor]:
    """Checks names and shapes (`check_fits`), and returns the tensors in each target's dtype and
    device: owned copies, or (`copy` False) the given tensors where they already are."""
    check_fits(tensors, targets, aliases, uri)
    # Owned copies: the served weights must not stay mapped to a file the trainer may overwrite.
    return {
        name: tensors[name].to(device=t.device, dtype=t.dtype, copy=copy).contiguous()
        for name, t in targets.items()
    }


def check_fits(
    tensors: dict[str, torch.Tensor], targets: dict[str, torch.Tensor], aliases: set[str], uri: str
) -> None:
    """FailedPrecondition naming what in `tensors` does not fit the model's `targets`: unknown or
    missing names, other shapes."""
    unknown = sorted(set(tensors) - set(targets) - aliases)
    missing = sorted(set(targets) - set(tensors))
    wrong = sorted(
        f"{name} {tuple(tensors[name].shape)} != {tuple(t.shape)}"
        for name, t in targets.items()
        if name in tensors and tensors[name].shape != t.shape
    )
    problems = []
    if unknown:
        problems.append(f"{len(unknown)} unknown tensors ({', '.join(unknown[:3])}…)")
    if missing:
        problems.append(f"{len(missing)} missing tensors ({', '.join(missing[:3])}…)")
    if wrong:
        problems.append(f"{len(wrong)} shape mismatches ({'; '.join(wrong[:3])})")
    if problems:
        raise FailedPrecondition(f"checkpoint {uri!r} does not fit the served model: {', '.join(problems)}")
