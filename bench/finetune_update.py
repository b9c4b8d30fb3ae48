"""One quickstart-shaped update by what it trains: every weight, LoRA adapters, the top layers only.

The update is one GRPO forward + backward of a quickstart step (`update_memory.quickstart_step`: 4
groups × 8 samples of one call, activation checkpointing and 1 MB unpooled blocks as the quickstart
has them) and the optimizer's step (`MomentumFreeAdamW` at β1 = 0, as the quickstart's), over:

- **full**: every weight of SmolLM2-135M;
- **lora**: the quickstart's adapters (`--finetune lora`: rank 16 on every linear layer, α = 32),
  the rest frozen;
- **top**: the top `--trained-layers` decoder layers and the final norm (`trainer.trained_layers`), the
  embeddings, LM head and layers below frozen: no graph and no backward below the lowest trained layer;

each in float32 and under `trainer.autocast: bfloat16`, the six arms alternating over `--rounds`,
each keeping its best. It measures the update alone, on a quiet core: in a run the update shares the
cores with the engine and the rollouts (`docs/quickstart-runs.md` has what the runs measured). The
LAST line is one JSON object.

    .venv/bin/python bench/finetune_update.py [--threads 1] [--rounds 2] [--trained-layers 15]
"""

import argparse
import json

import torch
from update_memory import (  # bench/: the script's own folder
    HEAP_MMAP_THRESHOLD_MB,
    quickstart_step,
    timed_update,
)

from clawgym.trainer.config import LoraSettings
from clawgym.trainer.memory import unpool_large_blocks
from clawgym.trainer.optim import MomentumFreeAdamW
from clawgym.trainer.policy import add_lora, freeze_below
from clawgym_app.commands.quickstart import QuickstartOptions, lora_adapters, trained_layers

MODEL = "smollm2-135m"
LORA = LoraSettings(**lora_adapters(QuickstartOptions.lora_rank))  # the quickstart's adapters


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (the quickstart's trainer: 1 on 2 cores)"
    )
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--trained-layers", type=int, help="default: the quickstart's in float32 (the top half)",
        default=trained_layers(QuickstartOptions.trained_layers, adapters=False, model=MODEL),
    )  # fmt: skip
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    assert unpool_large_blocks(HEAP_MMAP_THRESHOLD_MB), "glibc's mallopt refused the threshold"
    full, packs, cfg = quickstart_step(MODEL, activation_checkpointing=True)
    lora = add_lora(quickstart_step(MODEL, activation_checkpointing=True)[0], LORA)
    top = quickstart_step(MODEL, activation_checkpointing=True)[0]
    freeze_below(top, args.trained_layers)
    models = {"full": full, "lora": lora, "top": top}
    trained = {name: [q for q in m.parameters() if q.requires_grad] for name, m in models.items()}
    optimizers = {name: MomentumFreeAdamW(params, 2e-5, 0.999, 1e-8, 0.0) for name, params in trained.items()}

    def update(name: str, bfloat16: bool) -> float:
        return timed_update(models[name], packs, cfg, bfloat16, optimizers[name])

    arms = [(name, dtype) for dtype in ("float32", "bfloat16") for name in models]
    for name, dtype in arms:  # warm-up: pools, gradient buffers, the optimizer's state
        update(name, dtype == "bfloat16")
    best = {f"{name}_{dtype}": float("inf") for name, dtype in arms}
    for r in range(args.rounds):
        for name, dtype in arms:
            seconds = update(name, dtype == "bfloat16")
            best[f"{name}_{dtype}"] = min(best[f"{name}_{dtype}"], seconds)
            print(f"round {r + 1}, {name} {dtype}: {seconds:.2f} s", flush=True)
    figures: dict[str, float | int] = {f"update_s_{arm}": round(s, 3) for arm, s in best.items()}
    for dtype in ("float32", "bfloat16"):
        for name in ("lora", "top"):
            figures[f"full_over_{name}_{dtype}"] = round(best[f"full_{dtype}"] / best[f"{name}_{dtype}"], 3)
    figures |= {f"trained_params_{name}": sum(q.numel() for q in params) for name, params in trained.items()}
    figures["tree_tokens"] = sum(int(pack.input_ids.numel()) for pack in packs)
    for dtype in ("float32", "bfloat16"):
        print(f"{dtype}: full {best[f'full_{dtype}']:.2f} s, lora {best[f'lora_{dtype}']:.2f} s, "
              f"top {args.trained_layers} layers {best[f'top_{dtype}']:.2f} s (full / lora "
              f"{figures[f'full_over_lora_{dtype}']:.2f}, full / top {figures[f'full_over_top_{dtype}']:.2f})")  # fmt: skip
    print(json.dumps({"threads": args.threads, "rounds": args.rounds, "trained_layers": args.trained_layers,
                      **figures}))  # fmt: skip


if __name__ == "__main__":
    main()
