#!/usr/bin/env bash
# bench/gpu.sh: what a GPU machine computes, checked against the CPU path in one run under 10 minutes on
# one GPU (torch with CUDA; no vLLM and no network needed); one JSON line at the end. docs/gpu.md is the guide.
#
#   bash bench/gpu.sh                   # every stage on cuda
#   bash bench/gpu.sh --only exactness  # a rerun of some stages (env and models always run)
#   bash bench/gpu.sh --device cpu      # the same stages at toy sizes on a CPU
#   bench/gpu_prepare.sh                # on a machine with network, for a GPU machine without: writes
#                                       # .gpu/ (wheels + SmolLM2's config and tokenizer, ~6 MiB) to copy there
#
# Stages, in this order, each under `timeout` and all within a budget (GPU_SH_BUDGET, default
# 480 s; a stage gets what is left of it, and is skipped with under 20 s left); one failing is
# reported and the next ones run:
#   env          python, torch, CUDA, the GPU, package versions; which stage misses which module
#   models       SmolLM2-135M's architecture with random weights, from .gpu/models (its weights
#                do not travel: bench/gpu_checks.py says why that does not matter here)
#   exactness    the tree-packed update against the per-path reference (`clawgym.rl.per_path`,
#                float32, SDPA): tiny-qwen3 and smollm2-135m, float32 and bfloat16, the tree with
#                flex_attention (`rl.packing.flex_block_mask`) and with sdpa (bench/gpu_checks.py)
#   tree_smollm2 bench/tree_training.py on the GPU, bfloat16: the tree with flex_attention against
#                every path (sequence-packed with flex, one by one with SDPA), every call, and the
#                tree with SDPA's dense mask; traces of a 4,000-token system prompt, G = 8
#   engine       the torch engine built by `create_engine(InferenceConfig(device="cuda"))`:
#                generation logprobs against a teacher-forced forward, greedy against HF generate
#   inference_smollm2, inference_tiny   bench/inference.py on the GPU: 32 concurrent vs one by
#                one, vs HF generate on a padded batch, reload
#   tree_tiny    bench/tree_training.py for tiny-qwen3
#   pytest_gpu   tests/rl/test_flex_gpu.py (the CI-style assertion of the same invariant)
#   vllm         bench/gpu_vllm.py serve (only where the interpreter has vLLM, on cuda; VLLM_MODEL,
#                default tiny-qwen3, or a 0.5-8B folder): logprobs against a teacher-forced forward,
#                a weight update mid-stream (every token's version tag fits the weights that made it),
#                reload time, tokens/s at 32-256 concurrent requests
#   vllm_long_prompt   bench/gpu_vllm.py long_prompt: a 20k-token shared prefix, short suffixes:
#                prefix-cache hit rate, time to first token cold and warm
#   pytest_vllm  tests/inference/test_vllm.py -m gpu
#
# The last line (also $OUT/gpu.json with every stage's full result, $OUT/gpu.log with every log):
#   gpu, cuda, python, torch, transformers, missing     the machine; missing = {stage: module}
#   flex_loss_rel_diff_fp32, flex_grad_rel_diff_fp32    tree with flex_attention vs per-path, worst
#                                                       over the models (float32; ~1e-6 is exact)
#   sdpa_grad_rel_diff_fp32                             the same with the dense SDPA mask
#   flex_grad_rel_diff_bf16, per_path_grad_rel_diff_bf16   bfloat16 tree and bfloat16 per-path,
#                                                       each against the float32 reference
#   tree_training.{model}: sharing_ratio, speedup (tree vs the faster per-path method, wall),
#                speedup_vs_tree_sdpa, speedup_vs_calls, sharing_ratio_vs_calls, wall_s, peak_gib
#   engine.{model}: on, logprob_max_abs_diff, greedy_equal_hf_generate, speedup_32, tok_s_1,
#                tok_s_32, vs_hf_generate_32, reload_s
#   vllm: logprob_max_abs_diff, mixed_tokens (0 = none), reload_s, tok_s {concurrency: tok/s},
#         prefix_cache_hit_rate, ttft_cold_s, ttft_warm_s
#   stages       {stage: {rc, s}}                       rc 124 = timed out
#   errors       {stage[/model[/dtype/impl]]: text}     what failed, and why
# Exit status 0 when no stage failed, else 1 (the JSON line is printed either way).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

device=cuda smoke=0 only="" budget=${GPU_SH_BUDGET:-}
while [ $# -gt 0 ]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --only) only=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$device" = cpu ] && smoke=1
# Stage limits are GPU seconds; on a CPU (2 shared cores) everything is slower: scale them.
scale=1
[ "$device" = cpu ] && scale=8
budget=${budget:-$((480 * scale))}

work=${GPU_SH_WORK:-/tmp/clawgym-gpu}
out=${OUT:-$work/out}
rm -rf "$work/logs" "$work/stages.tsv"
mkdir -p "$work/logs" "$work/models" "$out"

# The interpreter: $PYTHON, else this checkout's .venv (here), else python3 (the GPU machine's torch).
py=${PYTHON:-}
[ -z "$py" ] && { [ -x .venv/bin/python ] && py=$root/.venv/bin/python || py=python3; }
# Carried wheels (bench/gpu_requirements.txt) go in only where the interpreter lacks them.
if ! "$py" -c "import pydantic" 2>/dev/null; then
  if ls .gpu/wheels/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$work/site" .gpu/wheels/*.whl ||
      echo "gpu.sh: installing the carried wheels failed; stages that need pydantic will say so"
  else
    echo "gpu.sh: no pydantic and no .gpu/wheels: run bench/gpu_prepare.sh on a machine with network and copy .gpu here"
  fi
fi
export PYTHONPATH="$work/site:$root/libs${PYTHONPATH:+:$PYTHONPATH}"
# No network there: never let a library wait on a hub. Compiled kernels are shared between stages.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TORCHINDUCTOR_CACHE_DIR=$work/inductor TRITON_CACHE_DIR=$work/triton

start=$(date +%s)
stage() { # stage NAME LIMIT_S COMMAND...: runs it under timeout within the budget, logs it
  local name=$1 limit=$(($2 * scale)) left t0 rc
  shift 2
  if [ -n "$only" ] && [[ ",$only,env,models," != *",$name,"* ]]; then return; fi
  left=$((budget - ($(date +%s) - start) - 10))
  if [ "$left" -lt 20 ]; then
    printf '%s\tskipped\t0\tbudget of %ss spent\n' "$name" "$budget" >>"$work/stages.tsv"
    echo "== $name: skipped, the budget is spent"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most ${limit}s): ${*/#$root\//}"
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$work/logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" "$limit" >>"$work/stages.tsv"
  grep -v '^{' "$work/logs/$name.log" | tail -n 4 | cut -c1-240
}
skip() { # skip NAME WHY: recorded as an error entry, so the JSON shows it was not run
  if [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; then
    printf '%s\tskipped\t0\t%s\n' "$1" "$2" >>"$work/stages.tsv"
  fi
}

smol=$work/models/smollm2-135m
if [ "$smoke" = 1 ]; then
  shapes=toy ex_shapes=toy reps=2 tokens=8 tree_dtype=float32 smol_dtype=float32
else
  shapes=gpu ex_shapes=cpu reps=3 tokens=32 tree_dtype=bfloat16 smol_dtype=bfloat16
fi
# The GPU traces' trees (~13k unique tokens, paths up to ~5.4k) fit one packed sequence there.
tree_budget=$([ "$smoke" = 1 ] && echo 4096 || echo 32768)
# torch has no FlexAttention backward on CPU: there the speed benches time SDPA only (exactness
# still tries flex and reports the error).
attn=flex_attention,sdpa
[ "$device" = cpu ] && attn=sdpa

stage env 60 "$py" bench/gpu_checks.py env --carry .gpu
stage models 60 "$py" bench/gpu_checks.py models --carry .gpu/models --to "$work/models"
models=tiny-qwen3
[ -f "$smol/config.json" ] && models="tiny-qwen3,smollm2-135m=$smol"
stage exactness 180 "$py" bench/gpu_checks.py exactness --device "$device" --models "$models" \
  --shapes "$ex_shapes" --dtypes float32,bfloat16 --attns flex_attention,sdpa
if [ -f "$smol/config.json" ]; then
  stage tree_smollm2 150 "$py" bench/tree_training.py --device "$device" --dtype "$tree_dtype" --attn "$attn" \
    --shapes "$shapes" --models "smollm2-135m=$smol" --reps "$reps" --budget "$tree_budget" --no-insertion
else
  skip tree_smollm2 "no $smol: .gpu/models was not carried"
fi
stage engine 90 "$py" bench/gpu_checks.py engine --device "$device" --models "$models" --tokens 24
if [ "$device" = cpu ]; then
  skip inference_smollm2 "smoke on CPU: SmolLM2's agent-step prefills take minutes on 2 cores"
elif [ -f "$smol/config.json" ]; then
  stage inference_smollm2 90 "$py" bench/inference.py --device "$device" --model "$smol" --dtype "$smol_dtype" \
    --tokens "$tokens" --repeat 2
else
  skip inference_smollm2 "no $smol: .gpu/models was not carried"
fi
stage tree_tiny 90 "$py" bench/tree_training.py --device "$device" --dtype "$tree_dtype" --attn "$attn" \
  --shapes "$shapes" --models tiny-qwen3 --reps "$reps" --budget "$tree_budget" --no-insertion
stage inference_tiny 60 "$py" bench/inference.py --device "$device" --model tiny-qwen3 --tokens "$tokens" \
  --repeat "$([ "$smoke" = 1 ] && echo 1 || echo 2)" --serial "$([ "$smoke" = 1 ] && echo 2 || echo 4)"
stage pytest_gpu 60 "$py" -m pytest --noconftest -q -p no:cacheprovider tests/rl/test_flex_gpu.py
# vLLM pins its own torch and is not in the GPU machine's image: these run where it is installed.
if [ "$device" != cuda ]; then
  why="vLLM serves on CUDA only (--device $device)"
elif ! "$py" -c "import vllm" 2>/dev/null; then
  why="no vllm package for $py (install the pinned one: deploy/vllm-pins.txt, deploy/vllm.md)"
else
  why=""
fi
if [ -n "$why" ]; then
  for name in vllm vllm_long_prompt pytest_vllm; do skip "$name" "$why"; done
else
  vllm_model=${VLLM_MODEL:-tiny-qwen3}
  stage vllm 240 "$py" bench/gpu_vllm.py serve --model "$vllm_model"
  stage vllm_long_prompt 120 "$py" bench/gpu_vllm.py long_prompt --model "$vllm_model"
  stage pytest_vllm 120 "$py" -m pytest -q -p no:cacheprovider -m gpu tests/inference/test_vllm.py
fi

echo "== done in $(($(date +%s) - start))s; full results: $out/gpu.json, logs: $out/gpu.log"
"$py" bench/gpu_report.py "$work" "$out"
report=$?
if [ "$report" != 0 ] || awk -F'\t' '$2 != "0" {bad = 1} END {exit !bad}' "$work/stages.tsv"; then
  exit 1
fi
