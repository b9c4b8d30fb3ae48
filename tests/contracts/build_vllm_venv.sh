#!/usr/bin/env bash
# Builds the venv the vLLM contract tests import vLLM from (no GPU needed: import only):
# the pinned vLLM (deploy/vllm-pins.txt) without its dependencies, then those dependencies minus
# the CUDA-only ones (kernels, NVIDIA libraries, vLLM's CUDA torch), with the pinned CPU torch.
#
#   tests/contracts/build_vllm_venv.sh [DIR]     # DIR defaults to .venv-vllm; ~1.5 min, ~3.7 GB
#
# Idempotent: a DIR that already holds the pinned vLLM is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${1:-.venv-vllm}
pins=deploy/vllm-pins.txt
vllm=$(grep -E '^vllm==' "$pins")
torch=$(grep -E '^torch==' "$pins")
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "
import importlib.metadata as m, sys
sys.exit(m.version('vllm') != '${vllm#vllm==}')" 2>/dev/null; then
  echo "build_vllm_venv: $venv already has $vllm"
  exit 0
fi
start=$(date +%s)
rm -rf "$venv"
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "$torch"
"${pip[@]}" --no-deps "$vllm"
# vLLM's requirements, less the ones that exist only for CUDA (the import does not need them).
"$venv/bin/python" - >"$venv/requirements.txt" <<'PY'
import re
from importlib.metadata import requires

CUDA_ONLY = re.compile(
    r"^(torch|torchaudio|torchvision|torchcodec|pynvvideocodec|flashinfer-python|apache-tvm-ffi|tilelang"
    r"|nvidia-.*|quack-kernels|tokenspeed-mla|humming-kernels|fastsafetensors|instanttensor|nvtx|zentorch)$",
    re.I,
)
for req in requires("vllm") or []:
    name = re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0]
    if "extra ==" not in req and not CUDA_ONLY.match(name):
        print(req)
PY
echo "$torch" >"$venv/constraints.txt"
"${pip[@]}" -r "$venv/requirements.txt" -c "$venv/constraints.txt"
"$venv/bin/python" -c "import vllm.engine.arg_utils, vllm.v1.engine.async_llm" 2>/dev/null
echo "build_vllm_venv: $vllm with $torch in $venv, $(($(date +%s) - start))s"
