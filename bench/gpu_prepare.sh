#!/usr/bin/env bash
# Run on a machine with network and ./install.sh's .venv, for a GPU machine without network: writes .gpu/
# (git-ignored), the one folder to copy into the checkout there before bench/gpu.sh:
#   .gpu/wheels/   the wheels of bench/gpu_requirements.txt, for CPython 3.12 on x86-64 Linux (for a GPU
#                  environment that lacks pydantic)
#   .gpu/models/smollm2-135m/   SmolLM2-135M's config, tokenizer and chat template, no weights
#                  (the wheel holding its weights is 93 MB; bench/gpu.sh draws random weights there)
# Prints the folder's size.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
[ -x "$py" ] || { echo "gpu_prepare: no .venv here: run ./install.sh first" >&2; exit 1; }
rm -rf .gpu/wheels
mkdir -p .gpu/wheels .gpu/models
"$py" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .gpu/wheels -r bench/gpu_requirements.txt
"$py" bench/gpu_checks.py carry-models --to .gpu/models
ls -l .gpu/wheels
du -sh .gpu
bytes=$(du -sb .gpu | cut -f1)
if [ "$bytes" -gt $((48 * 1024 * 1024)) ]; then
  echo "gpu_prepare: .gpu is $bytes bytes: more than the 48 MiB it should take" >&2
  exit 1
fi
echo "gpu_prepare: ready; copy .gpu/ into the checkout on the GPU machine, then run bench/gpu.sh there"
