# Sourced by the example scripts (and spec/helpers/postgres.lua): private
# servers in a temp dir, on free loopback ports, stopped by pid.
#   private_redis_start TMP     exports REDIS_URL; pid in TMP/redis.pid
#   private_postgres_start TMP  exports PGHOST, PGPORT, PGUSER, PGDATABASE
#                               (trust auth on 127.0.0.1); pid in TMP/pg.pid
#   private_stop TMP            stops both (whichever runs), by pid
#   private_session             a temp dir in PRIVATE_TMP; on exit, kills the
#                               script's background jobs still running (its
#                               host, a receiver), stops the servers, removes it
# initdb refuses to run as root: as root the cluster belongs to the postgres
# user (the postgresql package creates it).

# A port the kernel has just handed out (LUAKIQ_BIN: the binary; default build/luakiq).
free_port() {
  "${LUAKIQ_BIN:-build/luakiq}" lua <(echo 'print(require("luakiq.core").free_port())')
}

private_redis_start() {
  local tmp=$1 port
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp" --daemonize yes \
    --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log" --save '' --appendonly no
  export REDIS_URL="redis://127.0.0.1:$port/0"
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis-server did not start; see $tmp/redis.log" >&2
  return 1
}

private_postgres_start() {
  local tmp=$1 port bin as=()
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$bin/initdb" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; return 1; }
  port=$(free_port)
  mkdir -p "$tmp/pg"
  if [ "$(id -u)" = 0 ]; then chmod o+x "$tmp"; chown postgres "$tmp/pg"; as=(runuser -u postgres --); fi
  "${as[@]}" "$bin/initdb" -D "$tmp/pg/data" -A trust -U postgres >"$tmp/pg/initdb.log" 2>&1 ||
    { echo "initdb failed; see $tmp/pg/initdb.log" >&2; return 1; }
  "${as[@]}" "$bin/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/log" -w \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null ||
    { echo "PostgreSQL did not start; see $tmp/pg/log" >&2; return 1; }
  head -1 "$tmp/pg/data/postmaster.pid" >"$tmp/pg.pid"
  export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
}

private_stop() {
  local tmp=$1 pid
  for f in "$tmp/pg.pid" "$tmp/redis.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill -INT "$pid" 2>/dev/null || true # PostgreSQL: fast shutdown; Redis: exits
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    rm -f "$f"
  done
}

private_session() {
  PRIVATE_TMP=$(mktemp -d)
  trap private_session_end EXIT
}

private_session_end() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  private_stop "$PRIVATE_TMP"
  rm -rf "$PRIVATE_TMP"
}
