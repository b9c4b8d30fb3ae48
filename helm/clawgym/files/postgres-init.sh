#!/bin/sh
# PostgreSQL's first start (/docker-entrypoint-initdb.d: the official image and the stand-in alike;
# the Helm chart carries the same script): clawgym's own role, owning the clawgym database and
# nothing else. No superuser, CREATEDB, CREATEROLE or pg_execute_server_program, so no
# `COPY ... TO PROGRAM`; the superuser logs in over the container's local socket only.
set -eu
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname postgres \
  --set=role="${CLAWGYM_DB_USER:?}" --set=db="${CLAWGYM_DB_NAME:?}" --set=pw="${CLAWGYM_DB_PASSWORD:?}" <<'SQL'
CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD :'pw';
CREATE DATABASE :"db" OWNER :"role";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
SQL
# the first matching pg_hba line wins: the superuser over TCP is refused, whatever its password
{ echo "host all ${POSTGRES_USER:-postgres} all reject"; cat "$PGDATA/pg_hba.conf"; } > "$PGDATA/pg_hba.conf.new"
mv "$PGDATA/pg_hba.conf.new" "$PGDATA/pg_hba.conf"
