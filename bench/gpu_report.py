"""bench/gpu.sh's report: each stage's last JSON line, or its error, into one JSON object (stdlib only).

    python bench/gpu_report.py WORK OUT

Reads WORK/stages.tsv (name, exit code, seconds, limit per stage) and WORK/logs/<stage>.log;
writes OUT/gpu.json (every stage's full result) and OUT/gpu.log (every stage's log), and prints
the headline object (bench/gpu.sh's header lists its keys) as the last line. A stage that timed
out, exited non-zero or was skipped is an entry of `errors` (stage: text); so is a model or an
attention implementation that failed inside a stage that went on (`stage/model[/dtype/impl]`). A
stage that exits 0 without JSON (pytest) keeps its last line under `stages[name].said`.
"""

import json
import sys
from pathlib import Path


def last_json(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def tail(text: str, lines: int = 12, chars: int = 1500) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


def inner_errors(stage: str, result: dict, errors: dict) -> None:
    """Errors a stage recorded and went on past: per model, per dtype and attention implementation."""
    for model, res in (result.get("models") or {}).items():
        if not isinstance(res, dict):
            continue
        if "error" in res:
            errors[f"{stage}/{model}"] = res["error"]
        for dtype, figures in res.items():
            if isinstance(figures, dict):
                for impl, fig in figures.items():
                    if isinstance(fig, dict) and "error" in fig:
                        errors[f"{stage}/{model}/{dtype}/{impl}"] = fig["error"]


def worst(values: list) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None


def headline(results: dict) -> dict:
    """The figures the issue asks for, per model where there are several."""
    h: dict = {}
    env = results.get("env") or {}
    h.update({k: env.get(k) for k in ("gpu", "cuda", "python")})
    h["torch"] = (env.get("versions") or {}).get("torch")
    h["transformers"] = (env.get("versions") or {}).get("transformers")
    if env.get("missing"):
        h["missing"] = env["missing"]

    ex = (results.get("exactness") or {}).get("models") or {}

    def fig(dtype: str, impl: str, key: str) -> list:
        return [(m.get(dtype) or {}).get(impl, {}).get(key) for m in ex.values() if isinstance(m, dict)]

    h["flex_loss_rel_diff_fp32"] = worst(fig("float32", "flex_attention", "loss_rel_diff"))
    h["flex_grad_rel_diff_fp32"] = worst(fig("float32", "flex_attention", "grad_rel_diff"))
    h["sdpa_grad_rel_diff_fp32"] = worst(fig("float32", "sdpa", "grad_rel_diff"))
    h["flex_grad_rel_diff_bf16"] = worst(fig("bfloat16", "flex_attention", "grad_rel_diff"))
    h["per_path_grad_rel_diff_bf16"] = worst(fig("bfloat16", "per_path", "grad_rel_diff"))

    tree: dict = {}
    for stage in ("tree_smollm2", "tree_tiny"):
        for model, r in ((results.get(stage) or {}).get("models") or {}).items():
            tree[model] = {
                k: r.get(k)
                for k in ("dtype", "attn", "sharing_ratio", "speedup", "speedup_vs_tree_sdpa", "speedup_vs_calls",
                          "sharing_ratio_vs_calls", "grad_rel_diff", "wall_s", "peak_gib")
                if k in r
            }  # fmt: skip
    if tree:
        h["tree_training"] = tree

    engine = {m: {k: r.get(k) for k in ("logprob_max_abs_diff", "greedy_equal_hf_generate", "on") if k in r}
              for m, r in ((results.get("engine") or {}).get("models") or {}).items()}  # fmt: skip
    for stage in ("inference_smollm2", "inference_tiny"):
        r = results.get(stage) or {}
        if r:
            name = "smollm2-135m" if stage.endswith("smollm2") else "tiny-qwen3"
            engine.setdefault(name, {}).update(
                {
                    k: r.get(k)
                    for k in ("dtype", "speedup_32", "tok_s_1", "tok_s_32", "vs_hf_generate_32", "reload_s")
                }
            )
    if engine:
        h["engine"] = engine
    vllm = {**(results.get("vllm") or {}), **(results.get("vllm_long_prompt") or {})}
    keys = ("logprob_max_abs_diff", "mixed_tokens", "reload_s", "tok_s", "prefix_cache_hit_rate", "ttft_cold_s",
            "ttft_warm_s")  # fmt: skip
    if vllm:
        h["vllm"] = {k: vllm[k] for k in keys if k in vllm}
    return h


def main() -> None:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    stages, results, errors = {}, {}, {}
    log = []
    tsv = work / "stages.tsv"
    for row in tsv.read_text().splitlines() if tsv.is_file() else []:
        name, rc, seconds, limit = [*row.split("\t"), "", "", ""][:4]
        text = (work / "logs" / f"{name}.log").read_text(errors="replace") if rc != "skipped" else ""
        log.append(f"===== {name} (exit {rc}, {seconds}s of {limit}s)\n{text}")
        stages[name] = {"rc": rc, "s": int(seconds or 0)}
        if rc == "skipped":
            errors[name] = f"skipped: {limit}"
            continue
        result = last_json(text)
        if rc in ("124", "137"):
            errors[name] = f"timed out after {limit}s; last output: {tail(text, 6, 600)}"
        elif rc != "0":
            errors[name] = f"exit {rc}: {tail(text)}"
        elif result is None:  # a command that prints no JSON (pytest): its exit status says it all
            stages[name]["said"] = tail(text, 1, 200)
        if result is not None:
            results[name] = result
            inner_errors(name, result, errors)
    summary = {"headline": headline(results), "stages": stages, "errors": errors}
    (out / "gpu.json").write_text(json.dumps({**summary, "results": results}, indent=1, default=str) + "\n")
    (out / "gpu.log").write_text("\n".join(log))
    compact = {**summary["headline"], "stages": stages, "errors": {k: v[:400] for k, v in errors.items()}}
    print(json.dumps(compact, default=str))


if __name__ == "__main__":
    main()
