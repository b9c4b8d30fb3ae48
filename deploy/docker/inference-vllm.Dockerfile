# syntax=docker/dockerfile:1.7
# The GPU inference image: vLLM's own image (CUDA, its pinned torch) with clawgym added on top, so
# `clawgym serve inference` can run the vLLM engine. vLLM pins torch itself, so clawgym goes in
# with --no-deps and its other dependencies are installed from pyproject.toml minus torch.
#
#   docker build -f deploy/docker/inference-vllm.Dockerfile -t clawgym/inference-vllm:0.1.0 .
#
# The vLLM the engine is written and contract-tested against is pinned in deploy/vllm-pins.txt;
# keep VLLM_VERSION in step with it (tests/contracts fails otherwise; deploy/vllm.md).

ARG VLLM_VERSION=v0.33.0
FROM vllm/vllm-openai:${VLLM_VERSION}

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md deploy/docker/requirements.py /src/
COPY libs /src/libs
COPY services /src/services
# Dependencies from pyproject.toml except torch (vLLM's pinned build stays).
RUN python3 /src/requirements.py /src/pyproject.toml --without torch > /tmp/requirements.txt \
 && python3 -m pip install -r /tmp/requirements.txt \
 && python3 -m pip install --no-deps /src \
 && rm -rf /tmp/requirements.txt /src

RUN groupadd --gid 10001 clawgym \
 && useradd --uid 10001 --gid 10001 --home-dir /home/clawgym --create-home clawgym
ENV HOME=/home/clawgym PYTHONUNBUFFERED=1 CLAWGYM_INFERENCE__ENGINE=vllm
USER 10001:10001
WORKDIR /home/clawgym
EXPOSE 50052 9102
# The vLLM image's entrypoint is its own OpenAI server; replace it with the clawgym service.
ENTRYPOINT ["clawgym", "serve", "inference"]
