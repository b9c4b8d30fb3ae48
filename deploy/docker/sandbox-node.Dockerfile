# syntax=docker/dockerfile:1.7
# Sandbox images for the Node harnesses: Node 24 (OpenClaw needs >= 24.16), the tools task
# verifiers use (bash, python3, git, coreutils), and one harness CLI per image, pinned to the
# versions in HARNESSES.md. One image per harness keeps each pull small (the CLIs are 150-650 MB):
#
#   docker build -f deploy/docker/sandbox-node.Dockerfile --build-arg HARNESS=claude-code -t clawgym/sandbox-claude-code:2.1.332 deploy/docker
#   docker build -f deploy/docker/sandbox-node.Dockerfile --build-arg HARNESS=codex       -t clawgym/sandbox-codex:0.171.0      deploy/docker
#   docker build -f deploy/docker/sandbox-node.Dockerfile --build-arg HARNESS=all         -t clawgym/sandbox-node-all          deploy/docker
#
# The harness is a build argument, not a stage per harness, because the classic builder (no
# BuildKit) builds every stage before the target: one stage per harness made each image install
# the CLIs of all the harnesses above it. HARNESS=all installs every one (about 2 GB), for a single
# sandbox image that serves a harness mix.
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

FROM sandbox-base AS harness
ARG HARNESS=all
ARG CLAUDE_CODE=@anthropic-ai/claude-code@2.1.332
ARG OPENCLAW=openclaw@2026.9.6
ARG CODEX=@openai/codex@0.171.0
ARG OPENCODE=opencode-ai@1.18.33
ARG QWEN_CODE=@qwen-code/qwen-code@0.24.4
# hadolint ignore=DL3016,SC2086
RUN case "$HARNESS" in \
      claude-code) pkgs="$CLAUDE_CODE" ;; \
      openclaw) pkgs="$OPENCLAW" ;; \
      codex) pkgs="$CODEX" ;; \
      opencode) pkgs="$OPENCODE" ;; \
      qwen-code) pkgs="$QWEN_CODE" ;; \
      all) pkgs="$CLAUDE_CODE $OPENCLAW $CODEX $OPENCODE $QWEN_CODE" ;; \
      *) echo "HARNESS=$HARNESS is not one of claude-code openclaw codex opencode qwen-code all" >&2; exit 2 ;; \
    esac \
 && npm install -g --omit=dev $pkgs \
 && npm cache clean --force
USER 1000:1000
