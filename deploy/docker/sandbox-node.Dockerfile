# syntax=docker/dockerfile:1.7
# Sandbox images for the Node harnesses: Node 24 (OpenClaw needs >= 24.16), the tools task
# verifiers use (bash, python3, git, coreutils), and one harness CLI per build target, pinned to the
# versions in HARNESSES.md. One image per harness keeps each pull small (the CLIs are 150-650 MB):
#
#   docker build -f deploy/docker/sandbox-node.Dockerfile --target claude-code -t clawgym/sandbox-claude-code:2.1.332 deploy/docker
#   docker build -f deploy/docker/sandbox-node.Dockerfile --target codex       -t clawgym/sandbox-codex:0.171.0      deploy/docker
#
# The sandbox runs as the image's unprivileged `node` user (uid 1000, numeric so Kubernetes can check runAsNonRoot) in /workspace; the
# orchestrator copies the task in, runs the harness with its own HOME, then the verifier.

ARG NODE_IMAGE=node:24.22.3-bookworm-slim

FROM ${NODE_IMAGE} AS sandbox-base
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash ca-certificates curl git procps python3 python3-pytest tini \
 && rm -rf /var/lib/apt/lists/*
ENV NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false \
    DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
RUN mkdir -p /workspace && chown node:node /workspace
WORKDIR /workspace
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["sleep", "infinity"]

FROM sandbox-base AS claude-code
RUN npm install -g --omit=dev @anthropic-ai/claude-code@2.1.332 && npm cache clean --force
USER 1000:1000

FROM sandbox-base AS openclaw
RUN npm install -g --omit=dev openclaw@2026.9.6 && npm cache clean --force
USER 1000:1000

FROM sandbox-base AS codex
RUN npm install -g --omit=dev @openai/codex@0.171.0 && npm cache clean --force
USER 1000:1000

FROM sandbox-base AS opencode
RUN npm install -g --omit=dev opencode-ai@1.18.33 && npm cache clean --force
USER 1000:1000

FROM sandbox-base AS qwen-code
RUN npm install -g --omit=dev @qwen-code/qwen-code@0.24.4 && npm cache clean --force
USER 1000:1000

# The last stage is what a plain `docker build` (no --target) produces: every Node harness in one
# image, for a single sandbox image that serves a harness mix (about 2 GB).
FROM sandbox-base AS all
RUN npm install -g --omit=dev \
      @anthropic-ai/claude-code@2.1.332 openclaw@2026.9.6 @openai/codex@0.171.0 \
      opencode-ai@1.18.33 @qwen-code/qwen-code@0.24.4 \
 && npm cache clean --force
USER 1000:1000
