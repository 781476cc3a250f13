#!/bin/bash
# Measures the deny cache through the service, as in docs/benchmarks.md, "Deny cache (service)":
# one abusive key (limit 100/min, GCRA, used up) hammered over HTTP by `tollgate bench`
# (64 connections, one key), against a spawned Redis, alternating in one run:
#   before  the path before the local tier: `deny_cache = false`, `coalesce = false`
#   cache   the defaults: `deny_cache = true`, `coalesce = true`
#   then    with TOLLGATE_BEFORE=<binary>: that binary (the code before the issue, built from
#           its commit, e.g. `git worktree add /tmp/before 9f97268 && (cd /tmp/before &&
#           CARGO_TARGET_DIR=/tmp/before-target cargo build --release -p tollgate-server)`), on
#           its defaults; the load generator is this tree's binary throughout
#   ceiling this binary on the embedded memory store (no Redis at all): the same limit, key
#           and requests decided in the process. No cache of Redis's answers can answer
#           faster than this, so it is what "as fast as the service can refuse" means here.
# After the rounds, the median refusals/s of each mode and their ratios.
# With TOLLGATE_GRPC_CHANNELS=<n> the same requests go as Envoy's `ShouldRateLimit` (gRPC, one
# rule sending descriptor user=0 to the limit), the 64 tasks sharing n HTTP/2 connections as
# concurrent streams, as Envoy multiplexes them (0: a connection per task).
# Reports refusals/s, the scripts Redis ran per request (`INFO commandstats`, cmdstat_evalsha),
# and the CPU each process spent per request (utime + stime from /proc: the service, Redis,
# the load generator), which bounds what any cache can gain on this machine: the three share
# its cores, so a request costs their sum.
# With TOLLGATE_LOAD=h2load (and TOLLGATE_GRPC_CHANNELS=<n>, n dividing 64), the gRPC calls are
# sent by nghttp2's h2load instead (n connections, 64/n streams each, one thread): a client
# that costs a third of ours per call, so more of each row is the service.
# Needs: cargo build --release -p tollgate-server, redis-server, redis-cli, curl, bc (and h2load,
# package nghttp2-client, for TOLLGATE_LOAD=h2load).
# Usage: crates/tollgate-server/bench/deny_cache.sh [rounds] [seconds]   (from the repository root)
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-10}
BIN=target/release/tollgate
PORT=18082
GRPC_PORT=18083
REDIS_PORT=16398
source "$(dirname "$0")/common.sh"
evalsha() { redis-cli -p $REDIS_PORT info commandstats | awk -F'[=,:]' '/^cmdstat_evalsha:/ {print $3}'; }
children_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
# One ShouldRateLimit call as a gRPC frame, for h2load: domain "edge", descriptor user=0.
printf '\x00\x00\x00\x00\x13\x0a\x04edge\x12\x0b\x0a\x09\x0a\x04user\x12\x010' > "$WORK/call.bin"
MODES="before cache ceiling"
[ -n "${TOLLGATE_BEFORE:-}" ] && MODES="then before cache ceiling"
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    cache=false
    [ $mode = cache ] && cache=true
    serve=$BIN
    local_tier="deny_cache = $cache
coalesce = $cache"
    if [ $mode = then ]; then serve=$TOLLGATE_BEFORE; local_tier=""; fi
    store="redis = \"redis://127.0.0.1:$REDIS_PORT\"
prefix = \"dc$round$mode\""
    if [ $mode = ceiling ]; then store=""; local_tier=""; fi
    grpc_server="" grpc_rules=""
    if [ -n "${TOLLGATE_GRPC_CHANNELS:-}" ]; then
      grpc_server="[server]
grpc = \"127.0.0.1:$GRPC_PORT\""
      grpc_rules="[[envoy.rules]]
domain = \"edge\"
limit = \"abused\"
descriptor = [{ key = \"user\", part = \"user\" }]"
    fi
    cat > "$WORK/tollgate.toml" <<TOML
$grpc_server
[store]
$store
$local_tier

[[limits]]
name = "abused"
algorithm = "gcra"
limit = 100
period = "1m"
key = ["user"]
on_store_error = "deny"

$grpc_rules
TOML
    TOLLGATE_HTTP=127.0.0.1:$PORT $serve serve --config "$WORK/tollgate.toml" 2>"$WORK/serve.log" &
    SPID=$!
    for _ in $(seq 50); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && break; sleep 0.1; done
    # Use the quota up (101 checks), then measure.
    for _ in $(seq 101); do curl -s -o /dev/null http://127.0.0.1:$PORT/v1/check -d '{"limit":"abused","key":{"user":"0"}}'; done
    before=$(evalsha)
    s0=$(ticks $SPID); r0=$(ticks $RPID); c0=$(children_ticks)
    if [ -n "${TOLLGATE_GRPC_CHANNELS:-}" ] && [ "${TOLLGATE_LOAD:-}" = h2load ]; then
      h2load -c "$TOLLGATE_GRPC_CHANNELS" -m $((64 / TOLLGATE_GRPC_CHANNELS)) -t 1 -D "$SECS" \
        -d "$WORK/call.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$GRPC_PORT/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" \
        > "$WORK/h2load.txt"
      grep -q ' 0 failed, 0 errored' "$WORK/h2load.txt" || { cat "$WORK/h2load.txt" >&2; exit 1; }
      awk '/^finished in/ {rate = $4} /^requests:/ {n = $2}
        END {printf "%d h2load calls: %d decisions/s\n", n, rate}' "$WORK/h2load.txt" > "$WORK/bench.txt"
    elif [ -n "${TOLLGATE_GRPC_CHANNELS:-}" ]; then
      $BIN bench --grpc --url http://127.0.0.1:$GRPC_PORT -c 64 -d "${SECS}s" --domain edge \
        --descriptor user=0 --keys 1 --channels "$TOLLGATE_GRPC_CHANNELS" > "$WORK/bench.txt"
    else
      $BIN bench --url http://127.0.0.1:$PORT -c 64 -d "${SECS}s" -l abused --keys 1 > "$WORK/bench.txt"
    fi
    s1=$(ticks $SPID); r1=$(ticks $RPID); c1=$(children_ticks)
    after=$(evalsha)
    n=$(awk '/checks of|calls of|h2load calls/ {print $1; exit}' "$WORK/bench.txt")
    echo "round=$round mode=$mode scripts=$((after - before)) requests=$n" \
      "cpu_us_per_request: service=$(us_per $((s1 - s0)) "$n") redis=$(us_per $((r1 - r0)) "$n")" \
      "bench=$(us_per $((c1 - c0)) "$n") | $(tr '\n' ' ' < "$WORK/bench.txt")"
    echo "$mode $(awk '{for (i = 2; i <= NF; i++) if ($i == "decisions/s") {print $(i - 1); exit}}' \
      "$WORK/bench.txt")" >> "$WORK/rates"
    kill -TERM $SPID; wait $SPID || true
  done
done
median() { awk -v m="$1" '$1 == m {print $2}' "$WORK/rates" | sort -n | awk '{v[NR] = $1}
  END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { echo "scale=2; $1 / $2" | bc; }
declare -A med
for mode in $MODES; do med[$mode]=$(median $mode); echo "median $mode: ${med[$mode]} refusals/s"; done
base=before
[ -n "${TOLLGATE_BEFORE:-}" ] && base=then
echo "cache ÷ $base: $(ratio "${med[cache]}" "${med[$base]}")×;" \
  "ceiling ÷ $base: $(ratio "${med[ceiling]}" "${med[$base]}")×;" \
  "cache ÷ ceiling: $(ratio "${med[cache]}" "${med[ceiling]}")×"
