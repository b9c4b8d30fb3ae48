"""Checkpoints: HF-format safetensors folders the engines hot-reload, with the trainer's state beside them.

Owns the layout under `<checkpoint_uri>/<run_name>/` (a local folder or any fsspec URI):

    run.json                 the store run id this folder belongs to (how a restart finds its run)
    v000005/                 version 5 = the weights after 5 optimizer steps
      config.json, model.safetensors, tokenizer files   (a Hugging Face folder; LoRA merged in)
      trainer_state.pt       optimizer (None with save_optimizer_state off), scheduler, RNG,
                             value head, LoRA adapters, step/version

A folder kept only by `keep_every` (no longer one of the newest `keep_checkpoints`, so no resume or
engine reads it as the current policy) is made lean once a newer version is registered
(`trainer.lean_kept_checkpoints`): its float weights rewritten in bfloat16 and its optimizer state
dropped, which halves it; it still serves `clawgym eval --checkpoint V` and export, at bfloat16
precision. The bfloat16 weights are written beside the float32 ones when such a version is saved
(`LEAN_FILE`, from the tensors in memory: nothing is read back) and renamed over them later, so
making a folder lean costs the trainer no memory. Local folders only; a remote one stays as written.

Writing is all-or-nothing: a folder is written under a temporary name and renamed into place
(uploaded, for a remote URI), so a reader never sees half a checkpoint. A checkpoint counts only
once the store registered it (`loop.py` commits); folders of unregistered versions are leftovers of
a killed trainer and are overwritten. Under FSDP2 every rank takes part in gathering the full state
(collectives); only rank 0 writes.
"""

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from clawgym.errors import FailedPrecondition, NotFound
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.distributed import World
from clawgym.trainer.memory import return_free_memory
from clawgym.trainer.policy import BuiltPolicy, merge_lora_state

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.pt"
WEIGHTS_FILE = "model.safetensors"
LEAN_FILE = "model.safetensors.lean"  # its bfloat16 twin, written at save time (engines read *.safetensors only)
LEAN_DTYPE = torch.bfloat16
LEAN_KEY = "clawgym_lean"  # safetensors metadata of a folder made lean: the dtype it was rewritten in
RUN_MARKER = "run.json"
_VERSION_DIR = re.compile(r"^v(\d{6,})$")


def run_folder(cfg: TrainerConfig) -> str:
    return f"{cfg.checkpoint_uri.rstrip('/')}/{cfg.run_name}"


def version_uri(cfg: TrainerConfig, version: int) -> str:
    return f"{run_folder(cfg)}/v{version:06d}"


def version_of(uri: str) -> int | None:
    """The version a checkpoint folder's name says (`v000005`, or a hand-named `v5`), else None."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return int(name[1:]) if name[:1] == "v" and name[1:].isdigit() else None


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


# --- the run a checkpoint folder belongs to ---


def resolve_run(store: TrajectoryStore, cfg: TrainerConfig) -> str:
    """The store run to train: `trainer.run_id`, else the one recorded in run.json, else a new one."""
    if cfg.run_id:
        try:
            return store.get_run(cfg.run_id).id
        except NotFound:
            raise NotFound(f"trainer.run_id: the store has no run {cfg.run_id!r}") from None
    run_id = recorded_run_id(cfg)
    if run_id:
        try:
            return store.get_run(run_id).id
        except NotFound:
            raise FailedPrecondition(
                f"{run_folder(cfg)}/{RUN_MARKER} names run {run_id}, which the store does not know; "
                "set trainer.run_id, or a new trainer.run_name / checkpoint_uri"
            ) from None
    run = store.create_run(cfg.run_name, cfg.model_dump(mode="json"))
    fs, folder = fsspec.core.url_to_fs(run_folder(cfg))
    fs.makedirs(folder, exist_ok=True)
    with fs.open(f"{folder}/{RUN_MARKER}", "w") as f:
        f.write(json.dumps({"run_id": run.id, "run_name": cfg.run_name}))
    return run.id


def recorded_run_id(cfg: TrainerConfig) -> str:
    """The store run id the checkpoint folder's run.json records; '' when it has none."""
    marker = read_run_marker(cfg)
    return marker["run_id"] if marker else ""


def read_run_marker(cfg: TrainerConfig) -> dict[str, Any] | None:
    """The checkpoint folder's run.json (`{"run_id": …, "run_name": …}`, as `resolve_run` writes it), or
    None when there is none; FailedPrecondition, in one line naming the file, when it is not that."""
    fs, folder = fsspec.core.url_to_fs(run_folder(cfg))
    if not fs.exists(f"{folder}/{RUN_MARKER}"):
        return None
    shown = f"{run_folder(cfg)}/{RUN_MARKER}"
    try:
        data = json.loads(fs.cat_file(f"{folder}/{RUN_MARKER}"))
    except OSError as e:  # a folder of that name, no read permission
        problem = f"cannot be read ({type(e).__name__}: {e})"
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        problem = f"is not JSON ({type(e).__name__}: {e})"
    else:
        if not isinstance(data, dict):
            problem = f"holds {json.dumps(data)[:80]}, not an object"
        elif not isinstance(data.get("run_id"), str) or not data["run_id"]:
            problem = f"has no run_id string ({json.dumps(data)[:80]})"
        elif not isinstance(data.get("run_name", ""), str):
            problem = f"has a run_name that is not a string ({json.dumps(data)[:80]})"
        else:
            return data
    expected = {"run_id": "<store run id>", "run_name": cfg.run_name}
    raise FailedPrecondition(
        f"{shown} {problem}: clawgym train writes {json.dumps(expected)} there; restore it, set "
        "trainer.run_id to the run's id, or give this config its own trainer.run_name"
    )


def kept_checkpoints(store: TrajectoryStore, run_id: str) -> dict[int, str]:
    """version → URI of the run's registered checkpoints whose folders are still there (not pruned)."""
    kept = {}
    for c in store.list_checkpoints(run_id):
        fs, path = fsspec.core.url_to_fs(c.uri)
        if fs.exists(path):
            kept[c.version] = c.uri
    return kept


def find_checkpoint(store: TrajectoryStore, run_id: str, version: int) -> str:
    """The URI of the run's kept checkpoint of `version`; NotFound naming the kept versions if it was
    never registered or its folder was pruned (`trainer.keep_checkpoints`, `keep_every`)."""
    kept = kept_checkpoints(store, run_id)
    if version in kept:
        return kept[version]
    registered = any(c.version == version for c in store.list_checkpoints(run_id))
    why = "was not kept (its folder was pruned or deleted)" if registered else "was never registered"
    listed = ", ".join(f"v{v}" for v in sorted(kept)) or "none"
    raise NotFound(f"checkpoint v{version} of run {run_id} {why}; kept: {listed}")


# --- saving ---


def save_checkpoint(
    built: BuiltPolicy,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    tokenizer: Any,
    uri: str,
    trainer_state: dict[str, Any],
    world: World,
    with_optimizer: bool = True,
    lean_twin: bool = False,
    served: dict[str, torch.Tensor] | None = None,
) -> None:
    """Writes the checkpoint folder at `uri` (all ranks call it; rank 0 writes); the optimizer's
    state is None unless `with_optimizer`; `lean_twin`: the weights' bfloat16 twin too (`LEAN_FILE`),
    for a version that `make_lean` will rewrite; `served`: the weights as served (`serving_weights`),
    where the caller has them already (one process), instead of made again here."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(built.module, options=options)
    optim_state = (
        get_optimizer_state_dict(built.module, optimizer, options=options) if with_optimizer else None
    )
    if not world.is_main:
        return
    lm_state = {k.removeprefix("lm."): v for k, v in state.items() if k.startswith("lm.")}
    weights = served if served is not None else _as_served(lm_state, built)
    config = built.module.lm.config
    extra = {
        "optimizer": optim_state,
        "scheduler": scheduler.state_dict(),
        "value_head": {
            k.removeprefix("value_head."): v for k, v in state.items() if k.startswith("value_head.")
        },
        "adapters": {k: v for k, v in lm_state.items() if "lora_" in k},
        "torch_rng": torch.get_rng_state(),
        **trainer_state,
    }
    tensors = {k: v.contiguous() for k, v in weights.items()}

    def write(folder: Path) -> None:
        save_file(tensors, str(folder / WEIGHTS_FILE), {"format": "pt"})
        if lean_twin:
            save_file(_lean(tensors), str(folder / LEAN_FILE), _lean_metadata())
        config.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        torch.save(extra, folder / STATE_FILE)

    _publish_folder(write, uri)


def serving_weights(built: BuiltPolicy) -> dict[str, torch.Tensor]:
    """The policy's weights as an engine serves them (HF names, LoRA merged, a tied head left out),
    where they are: what a checkpoint holds, without the copy to host memory. One process only (under
    FSDP2 the weights are shards; `save_checkpoint` gathers them)."""
    lm_state = {k: v.detach() for k, v in built.module.lm.state_dict().items()}
    return _as_served(lm_state, built)


def _as_served(lm_state: dict[str, torch.Tensor], built: BuiltPolicy) -> dict[str, torch.Tensor]:
    weights = merge_lora_state(lm_state, built.lora) if built.lora is not None else lm_state
    if getattr(built.module.lm.config, "tie_word_embeddings", False):
        weights.pop("lm_head.weight", None)  # tied to the embedding, as save_pretrained writes it
    return weights


def _publish_folder(write: Callable[[Path], None], uri: str) -> None:
    """Writes a checkpoint folder with `write` and makes it visible at `uri` all at once: locally,
    written beside the target and renamed (one write of the bytes); remotely, uploaded when whole."""
    fs, target = fsspec.core.url_to_fs(uri)
    if _is_local(fs):
        final = Path(target)
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = final.parent / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        write(staging)
        if final.exists():  # an unregistered leftover of a killed trainer
            shutil.rmtree(final)
        os.replace(staging, final)
        return
    with tempfile.TemporaryDirectory(prefix="clawgym-ckpt-") as tmp:
        staging = Path(tmp) / "v"
        staging.mkdir()
        write(staging)
        if fs.exists(target):
            fs.rm(target, recursive=True)
        fs.put(str(staging), target, recursive=True)


def becomes_lean(cfg: TrainerConfig, version: int) -> bool:
    """Whether `version` will be kept only by `keep_every` once newer versions exist (`make_lean`)."""
    lean = cfg.lean_kept_checkpoints and cfg.keep_every > 0 and version % cfg.keep_every == 0
    return lean and _is_local(fsspec.core.url_to_fs(run_folder(cfg))[0])


def is_kept(cfg: TrainerConfig, version: int, newest: int) -> bool:
    """Whether version's folder survives pruning once `newest` is registered: one of the newest
    `keep_checkpoints`, or a multiple of `keep_every`."""
    return version > newest - cfg.keep_checkpoints or (cfg.keep_every > 0 and version % cfg.keep_every == 0)


def prune_checkpoints(cfg: TrainerConfig, newest: int) -> list[str]:
    """Deletes the version folders `is_kept` does not keep, and staging leftovers, and makes lean
    the folder that `newest` leaves kept only by `keep_every` (`becomes_lean`); returns the deleted
    names."""
    fs, folder = fsspec.core.url_to_fs(run_folder(cfg))
    deleted = []
    for path in fs.ls(folder, detail=False):
        name = str(path).rstrip("/").rsplit("/", 1)[-1]
        match = _VERSION_DIR.match(name)
        version = int(match.group(1)) if match else None
        stale_tmp = name.startswith(".v") and ".tmp-" in name
        if (version is not None and not is_kept(cfg, version, newest)) or stale_tmp:
            fs.rm(path, recursive=True)
            deleted.append(name)
        elif version == newest - cfg.keep_checkpoints and becomes_lean(cfg, version):
            make_lean(Path(path))  # it has just left the newest: kept only by keep_every from now on
    return deleted


def _lean(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to(LEAN_DTYPE) if v.is_floating_point() else v for k, v in tensors.items()}


def _lean_metadata() -> dict[str, str]:
    return {"format": "pt", LEAN_KEY: str(LEAN_DTYPE).removeprefix("torch.")}


def make_lean(folder: Path) -> bool:
    """Puts a checkpoint folder's weights in bfloat16 (its `LEAN_FILE` renamed over them; a folder
    saved without one is converted) and drops its optimizer state; False where it was lean already.
    Each file is replaced whole, so a reader has the old or the new one."""
    weights, twin = folder / WEIGHTS_FILE, folder / LEAN_FILE
    if not weights.is_file():
        return False
    with safe_open(str(weights), "pt") as f:
        if (f.metadata() or {}).get(LEAN_KEY):
            return False
    if not twin.is_file():  # saved without a twin (an older run, or keep_every changed): convert it
        staging = folder / f".{LEAN_FILE}.tmp-{os.getpid()}"
        with safe_open(str(weights), "pt") as f:
            save_file(_lean({k: f.get_tensor(k) for k in f.keys()}), str(staging), _lean_metadata())  # noqa: SIM118
        os.replace(staging, twin)
        return_free_memory()
    state_file = folder / STATE_FILE
    if state_file.is_file():  # mapped: only what is written back is read
        state = torch.load(state_file, map_location="cpu", weights_only=False, mmap=True)
        if state.get("optimizer") is not None:
            state["optimizer"] = None
            torch.save(state, folder / f".{STATE_FILE}.tmp-{os.getpid()}")
            os.replace(folder / f".{STATE_FILE}.tmp-{os.getpid()}", state_file)
    config_file = folder / "config.json"
    if config_file.is_file():  # a reader that follows the folder's dtype loads what is there
        config = json.loads(config_file.read_text())
        for key in ("torch_dtype", "dtype"):
            if key in config:
                config[key] = "bfloat16"
        config_file.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(twin, weights)
    return True


# --- loading ---


def local_folder(uri: str, cache: Path) -> Path:
    """A local folder with the checkpoint's files: the folder itself, or a download into `cache`."""
    fs, target = fsspec.core.url_to_fs(uri)
    if _is_local(fs):
        if not Path(target).is_dir():
            raise FailedPrecondition(f"checkpoint {uri!r} is gone (pruned or deleted)")
        return Path(target)
    local = cache / Path(target).name
    if not local.exists():
        fs.get(target, str(local), recursive=True)
    return local


def load_trainer_state(folder: Path) -> dict[str, Any]:
    """The optimizer/scheduler/RNG/value-head/adapter state saved beside the weights."""
    return torch.load(folder / STATE_FILE, map_location="cpu", weights_only=False)


def restore_optimizer(built: BuiltPolicy, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> bool:
    """Loads a full (unsharded) optimizer state into a possibly sharded optimizer (every rank);
    False if the checkpoint was written without one (`trainer.save_optimizer_state: false`)."""
    if state.get("optimizer") is None:
        return False
    set_optimizer_state_dict(
        built.module, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)
    )
    return True
