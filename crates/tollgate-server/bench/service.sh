#!/bin/bash
# Measures the service as in docs/benchmarks.md, "Service (HTTP)": for the memory store and a
# spawned Redis, three rounds of wrk on /healthz, wrk on /v1/check and `tollgate bench`.
# Needs: a release build with the default features (cargo build --release -p tollgate-server:
# `tollgate bench` is its `load` feature), wrk, redis-server.
# Usage: crates/tollgate-server/bench/service.sh [rounds]   (from the repository root)
set -euo pipefail
ROUNDS=${1:-3}
BIN=target/release/tollgate
CFG=examples/tollgate.toml
PORT=18081
REDIS_PORT=16399
WORK=$(mktemp -d)
trap 'kill $RPID ${SPID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
cat > "$WORK/check.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"limit": "sms", "key": {"user": "42"}}'
wrk.headers["Content-Type"] = "application/json"
LUA
redis-server --port $REDIS_PORT --save "" --appendonly no --logfile "$WORK/redis.log" &
RPID=$!
sleep 0.5
for round in $(seq "$ROUNDS"); do
  for store in memory redis; do
    if [ $store = redis ]; then export TOLLGATE_REDIS_URL=redis://127.0.0.1:$REDIS_PORT; else unset TOLLGATE_REDIS_URL; fi
    TOLLGATE_HTTP=127.0.0.1:$PORT $BIN serve --config $CFG 2>"$WORK/serve-$store.log" &
    SPID=$!
    sleep 1
    h=$(wrk -t2 -c64 -d10s http://127.0.0.1:$PORT/healthz | awk '/Requests\/sec/ {print $2}')
    w=$(wrk -t2 -c64 -d10s -s "$WORK/check.lua" http://127.0.0.1:$PORT/v1/check | awk '/Requests\/sec/ {print $2}')
    b=$($BIN bench --url http://127.0.0.1:$PORT -c 64 -d 10s -l sms | tr '\n' ' ')
    r=$(awk -v w="$w" -v h="$h" 'BEGIN { printf "%.2f", w / h }')
    echo "round=$round store=$store wrk_healthz=$h wrk_check=$w check/healthz=$r bench: $b"
    kill -TERM $SPID; wait $SPID || true
  done
done
