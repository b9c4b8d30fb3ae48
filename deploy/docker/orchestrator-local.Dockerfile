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

ARG BASE_IMAGE=clawgym/base:0.1.0
ARG NODE_IMAGE=node:24.22.3-bookworm-slim

FROM ${NODE_IMAGE} AS node

FROM ${BASE_IMAGE}
ARG HARNESS_NPM_PACKAGES=""
ARG MINI_SWE_AGENT_VERSION=2.4.6
USER 0
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && if [ -n "${HARNESS_NPM_PACKAGES}" ]; then npm install -g --omit=dev ${HARNESS_NPM_PACKAGES} && npm cache clean --force; fi \
 && /opt/clawgym/bin/pip install --no-cache-dir "mini-swe-agent==${MINI_SWE_AGENT_VERSION}"
USER 10001:10001
EXPOSE 50053 9103
ENTRYPOINT ["/usr/bin/tini", "--", "clawgym", "serve", "orchestrator"]
