#!/bin/bash
# Measures the service's allocator as in docs/benchmarks.md, "Allocator": this tree's binary
# (mimalloc, the default feature) against the same code on the system allocator (glibc's
# malloc), alternating in one run, on three paths through HTTP:
#   everyday  a spawned Redis, GCRA 1 000 000/min, 10 000 keys: every check admitted
#   refused   one key used up, `deny_cache = false`: one script per refusal
#   cached    one key used up, the defaults: refusals answered by the deny cache
# and one flood on the memory store (2 000 000 new keys, sliding log), for the memory each
# allocator keeps: VmRSS after the flood and VmHWM.
# The system-allocator binary is this tree without the `mimalloc` feature, copied aside:
#   cargo build --release -p tollgate-server --no-default-features --features load &&
#     cp target/release/tollgate /tmp/tollgate-system && cargo build --release -p tollgate-server
# and passed as TOLLGATE_SYSTEM_ALLOC=/tmp/tollgate-system. Its `tollgate bench`
# is the load generator of every row, so both services face the same client.
# Reports decisions/s, the service's CPU per request (utime + stime from /proc) and, when
# `perf` is installed, its `futex` calls per request (how often a thread had to wait for, or
# wake, another).
# Needs: cargo build --release -p tollgate-server, redis-server, redis-cli, curl, bc.
# Usage: TOLLGATE_SYSTEM_ALLOC=<binary> crates/tollgate-server/bench/allocator.sh [rounds] [seconds]
#        (from the repository root)
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-6}
MIMALLOC=target/release/tollgate
SYSTEM=${TOLLGATE_SYSTEM_ALLOC:?set TOLLGATE_SYSTEM_ALLOC to a binary built with --no-default-features --features load}
LOAD=$SYSTEM
PORT=18084
REDIS_PORT=16397
source "$(dirname "$0")/common.sh"
status() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

# serve <binary> <config>: starts the service, waits for /healthz
serve() {
  TOLLGATE_HTTP=127.0.0.1:$PORT $1 serve --config "$2" 2>"$WORK/serve.log" &
  SPID=$!
  for _ in $(seq 50); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && break; sleep 0.1; done
}

for round in $(seq "$ROUNDS"); do
  for path in everyday refused cached; do
    for bin in $SYSTEM $MIMALLOC; do
      name=mimalloc
      [ "$bin" = "$SYSTEM" ] && name=system
      limit=100 keys=1 local_tier=""
      case $path in
        everyday) limit=1000000 keys=10000 ;;
        refused) local_tier="deny_cache = false" ;;
      esac
      cat > "$WORK/tollgate.toml" <<TOML
[store]
redis = "redis://127.0.0.1:$REDIS_PORT"
prefix = "al$round$path$name"
$local_tier

[[limits]]
name = "l"
algorithm = "gcra"
limit = $limit
period = "1m"
key = ["user"]
on_store_error = "deny"
TOML
      serve "$bin" "$WORK/tollgate.toml"
      # Use the one key's quota up (the refused and cached paths), then measure.
      if [ $keys = 1 ]; then
        for _ in $(seq 101); do curl -s -o /dev/null http://127.0.0.1:$PORT/v1/check -d '{"limit":"l","key":{"user":"0"}}'; done
      fi
      s0=$(ticks $SPID)
      $LOAD bench --url http://127.0.0.1:$PORT -c 64 -d "${SECS}s" -l l --keys $keys > "$WORK/bench.txt" &
      BPID=$!
      futex=""
      if command -v perf >/dev/null; then
        sleep 1
        perf stat -x, -e 'syscalls:sys_enter_futex' -p $SPID -o "$WORK/perf.txt" -- sleep $((SECS - 2)) >/dev/null 2>&1 || true
        f0=$(awk -F, '/futex/ {print $1}' "$WORK/perf.txt")
      fi
      wait $BPID
      s1=$(ticks $SPID)
      n=$(awk '/checks of/ {print $1; exit}' "$WORK/bench.txt")
      rate=$(awk '/checks of/ {for (i = 1; i <= NF; i++) if ($i == "decisions/s") print $(i - 1)}' "$WORK/bench.txt")
      if [ -n "${f0:-}" ]; then
        # perf counted over SECS - 2 of the SECS seconds: per request of that share.
        futex=" futex_per_request=$(echo "scale=3; $f0 / ($rate * ($SECS - 2))" | bc)"
      fi
      echo "round=$round path=$path allocator=$name decisions_per_s=$rate" \
        "service_cpu_us_per_request=$(us_per $((s1 - s0)) "$n")$futex"
      kill -TERM $SPID; wait $SPID || true
    done
  done
  for bin in $SYSTEM $MIMALLOC; do
    name=mimalloc
    [ "$bin" = "$SYSTEM" ] && name=system
    cat > "$WORK/memory.toml" <<TOML
[[limits]]
name = "l"
algorithm = "sliding_log"
limit = 1000
period = "1m"
key = ["user"]
on_store_error = "deny"
TOML
    serve "$bin" "$WORK/memory.toml"
    start=$(status $SPID VmRSS)
    $LOAD bench --url http://127.0.0.1:$PORT -c 64 -d "${SECS}s" -l l --keys 2000000 > "$WORK/bench.txt"
    rate=$(awk '/checks of/ {for (i = 1; i <= NF; i++) if ($i == "decisions/s") print $(i - 1)}' "$WORK/bench.txt")
    echo "round=$round path=memory-flood allocator=$name decisions_per_s=$rate" \
      "rss_start_kib=$start rss_end_kib=$(status $SPID VmRSS) rss_peak_kib=$(status $SPID VmHWM)"
    kill -TERM $SPID; wait $SPID || true
  done
done
