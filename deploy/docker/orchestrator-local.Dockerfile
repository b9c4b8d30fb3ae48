# syntax=docker/dockerfile:1.7
# The orchestrator for docker-compose: sandboxes are local processes inside this container
# (ARCHITECTURE.md §8), so the image carries Node 24 and the harness CLIs next to clawgym.
# In a cluster the orchestrator starts sandbox pods instead and uses services/orchestrator/Dockerfile.
#
#   docker build -f deploy/docker/orchestrator-local.Dockerfile -t clawgym/orchestrator-local:0.1.0 \
#     --build-arg HARNESS_NPM_PACKAGES="@openai/codex@0.171.0" .
#
# HARNESS_NPM_PACKAGES picks the Node harnesses to bake in (pinned versions from HARNESSES.md);
# the default is none: the reference harness and mini-swe-agent are Python and always present.
# Build context: the repository root.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG NODE_IMAGE=node:24.22.3-bookworm-slim

FROM ${NODE_IMAGE} AS node

# --- build: the same venv as deploy/docker/base.Dockerfile, plus mini-swe-agent ------------------
FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG MINI_SWE_AGENT_VERSION=2.4.6
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/clawgym \
 && /opt/clawgym/bin/pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md /src/
COPY libs /src/libs
COPY services /src/services
RUN /opt/clawgym/bin/pip install /src "mini-swe-agent==${MINI_SWE_AGENT_VERSION}"

# --- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG HARNESS_NPM_PACKAGES=""
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini bubblewrap git ca-certificates curl procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && if [ -n "${HARNESS_NPM_PACKAGES}" ]; then npm install -g --omit=dev ${HARNESS_NPM_PACKAGES} && npm cache clean --force; fi
RUN groupadd --gid 10001 clawgym \
 && useradd --uid 10001 --gid 10001 --home-dir /home/clawgym --create-home --shell /bin/bash clawgym
COPY --from=build /opt/clawgym /opt/clawgym
ENV PATH=/opt/clawgym/bin:$PATH PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HOME=/home/clawgym \
    CLAWGYM_ORCHESTRATOR__SANDBOX_BACKEND=local
USER 10001:10001
WORKDIR /home/clawgym
EXPOSE 50053
ENTRYPOINT ["/usr/bin/tini", "--", "clawgym", "serve", "orchestrator"]
