# syntax=docker/dockerfile:1.7
# Sandbox image for the Python harnesses: mini-swe-agent (pinned as in HARNESSES.md) and clawgym's
# reference harness. The reference agent is one standard-library script the orchestrator copies into
# the sandbox's HOME (libs/clawgym/harnesses/reference_agent.py), so it needs only python3 here.
# pytest is what Terminal-Bench verifiers run; bash, git and coreutils what task scripts expect.
#
#   docker build -f deploy/docker/sandbox-python.Dockerfile -t clawgym/sandbox-python:0.1.0 deploy/docker

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
FROM ${PYTHON_IMAGE}
ARG MINI_SWE_AGENT_VERSION=2.4.6
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash ca-certificates curl git procps tini \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MSWEA_CONFIGURED=true MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True
RUN pip install "mini-swe-agent==${MINI_SWE_AGENT_VERSION}" "pytest==8.4.2"
RUN groupadd --gid 1000 sandbox \
 && useradd --uid 1000 --gid 1000 --home-dir /home/sandbox --create-home sandbox \
 && mkdir -p /workspace && chown sandbox:sandbox /workspace
USER 1000:1000
WORKDIR /workspace
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["sleep", "infinity"]
