#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests, on 127.0.0.1 only, trust auth, in its own directory.
# It offers TLS (plain connections are taken too): a CA of its own signs a certificate for
# `localhost` only (so a check of the name fails for 127.0.0.1); the CA is the server's
# ssl_ca_file, which the TLS tests read with SHOW ssl_ca_file.
#   cluster.sh start    initdb (if needed) and start it; prints its URL (postgres://…)
#   cluster.sh restart  fast restart (the tests use it to cut every connection mid-load)
#   cluster.sh stop     stop it and delete it
# IDEMGATE_PG_DIR (default /tmp/idemgate-pg) and IDEMGATE_PG_PORT (default 54329) choose where.
# Needs Debian's postgresql server package (.ci/deps installs it with IDEMGATE_DEPS=postgres).
set -euo pipefail
cmd=${1:?usage: cluster.sh start|restart|stop}
dir=${IDEMGATE_PG_DIR:-/tmp/idemgate-pg}
port=${IDEMGATE_PG_PORT:-54329}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "no PostgreSQL server installed (apt-get install postgresql)" >&2; exit 1; }
# initdb and postgres refuse to run as root: run them as the postgres user then.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
url="postgres://postgres@127.0.0.1:$port/postgres"
running() { as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; }

case $cmd in
  start)
    if ! running; then
      rm -rf "$dir" && mkdir -p "$dir"
      [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
      as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
      tls="$dir/tls" && mkdir -p "$tls"
      {
        openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=idemgate-test-ca \
          -keyout "$tls/ca.key" -out "$tls/ca.crt"
        openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
          -keyout "$tls/server.key" -out "$tls/server.csr"
        printf '%s\n' 'subjectAltName=DNS:localhost' 'basicConstraints=critical,CA:FALSE' \
          'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' >"$tls/ext"
        openssl x509 -req -days 30 -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
          -CAcreateserial -extfile "$tls/ext" -out "$tls/server.crt"
      } >"$dir/tls.log" 2>&1 || { cat "$dir/tls.log" >&2; exit 1; }
      chmod 600 "$tls/server.key" "$tls/ca.key"
      [ "$(id -u)" -eq 0 ] && chown -R postgres: "$tls"
      as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c ssl=on \
            -c ssl_cert_file=$tls/server.crt -c ssl_key_file=$tls/server.key -c ssl_ca_file=$tls/ca.crt" \
        start >/dev/null \
        || { cat "$dir/server.log" >&2; exit 1; }
    fi
    echo "$url"
    ;;
  restart)
    as_pg "$bin/pg_ctl" -D "$dir/data" -w -m fast restart >/dev/null
    ;;
  stop)
    if running; then as_pg "$bin/pg_ctl" -D "$dir/data" -w -m fast stop >/dev/null; fi
    rm -rf "$dir"
    ;;
  *) echo "usage: cluster.sh start|restart|stop" >&2; exit 2 ;;
esac
