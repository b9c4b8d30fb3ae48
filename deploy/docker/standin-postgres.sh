#!/bin/sh
# The postgres stand-in's entry point: what the official image does on first start (initdb with
# POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, password auth from other hosts, the scripts in
# /docker-entrypoint-initdb.d run against a socket-only server), then postgres.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" > "$pwfile"
  initdb -D "$PGDATA" --encoding=UTF8 --locale=C.UTF-8 -U "${POSTGRES_USER:-postgres}" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  db=${POSTGRES_DB:-${POSTGRES_USER:-postgres}}
  if [ "$db" != postgres ]; then createdb -U "${POSTGRES_USER:-postgres}" "$db"; fi
  for script in /docker-entrypoint-initdb.d/*.sh; do
    if [ -f "$script" ]; then sh "$script"; fi
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
