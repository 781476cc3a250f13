#!/bin/bash
# Measures the deny cache through the service, as in docs/benchmarks.md, "Deny cache (service)":
# one abusive key (limit 100/min, GCRA, used up) hammered over HTTP by `tollgate bench`
# (64 connections, one key), against a spawned Redis, with `[store] deny_cache` off and on,
# alternating, in one run. Reports refusals/s and the scripts Redis ran per request
# (`INFO commandstats`, cmdstat_evalsha).
# Needs: cargo build --release -p tollgate-server, redis-server, redis-cli.
# Usage: crates/tollgate-server/bench/deny_cache.sh [rounds] [seconds]   (from the repository root)
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-10}
BIN=target/release/tollgate
PORT=18082
REDIS_PORT=16398
WORK=$(mktemp -d)
trap 'kill $RPID ${SPID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
redis-server --port $REDIS_PORT --save "" --appendonly no --logfile "$WORK/redis.log" &
RPID=$!
for _ in $(seq 50); do redis-cli -p $REDIS_PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
evalsha() { redis-cli -p $REDIS_PORT info commandstats | awk -F'[=,:]' '/^cmdstat_evalsha:/ {print $3}'; }
for round in $(seq "$ROUNDS"); do
  for cache in false true; do
    cat > "$WORK/tollgate.toml" <<TOML
[store]
redis = "redis://127.0.0.1:$REDIS_PORT"
prefix = "dc$round$cache"
deny_cache = $cache

[[limits]]
name = "abused"
algorithm = "gcra"
limit = 100
period = "1m"
key = ["user"]
on_store_error = "deny"
TOML
    TOLLGATE_HTTP=127.0.0.1:$PORT $BIN serve --config "$WORK/tollgate.toml" 2>"$WORK/serve.log" &
    SPID=$!
    for _ in $(seq 50); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && break; sleep 0.1; done
    # Use the quota up (101 checks), then measure.
    for _ in $(seq 101); do curl -s -o /dev/null http://127.0.0.1:$PORT/v1/check -d '{"limit":"abused","key":{"user":"0"}}'; done
    before=$(evalsha)
    report=$($BIN bench --url http://127.0.0.1:$PORT -c 64 -d "${SECS}s" -l abused --keys 1 | tr '\n' ' ')
    after=$(evalsha)
    echo "round=$round deny_cache=$cache scripts=$((after - before)) bench: $report"
    kill -TERM $SPID; wait $SPID || true
  done
done
