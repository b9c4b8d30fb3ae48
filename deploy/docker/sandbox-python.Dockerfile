# syntax=docker/dockerfile:1.7
# Sandbox image for the Python harnesses: mini-swe-agent (pinned as in HARNESSES.md) and clawgym's
# reference harness (a small standalone agent that speaks OpenAI Chat Completions over HTTP).
# The reference harness comes from the clawgym package, installed without its heavy dependencies
# (torch, transformers): the harness needs only the standard library and an HTTP client.
#
#   docker build -f deploy/docker/sandbox-python.Dockerfile -t clawgym/sandbox-python:0.1.0 .

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
FROM ${PYTHON_IMAGE}
ARG MINI_SWE_AGENT_VERSION=2.4.6
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash ca-certificates curl git procps tini \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MSWEA_CONFIGURED=true MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True
COPY pyproject.toml README.md /src/
COPY libs /src/libs
COPY services /src/services
RUN pip install "mini-swe-agent==${MINI_SWE_AGENT_VERSION}" "httpx>=0.27" "pytest>=8.3" \
 && pip install --no-deps /src \
 && rm -rf /src
RUN groupadd --gid 1000 sandbox \
 && useradd --uid 1000 --gid 1000 --home-dir /home/sandbox --create-home sandbox \
 && mkdir -p /workspace && chown sandbox:sandbox /workspace
USER 1000:1000
WORKDIR /workspace
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["sleep", "infinity"]
