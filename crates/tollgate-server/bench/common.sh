# Sourced by the service benchmarks of this directory: a spawned Redis and the /proc readings
# they report. Expects REDIS_PORT set and `set -euo pipefail`; sets WORK (a temporary
# directory, removed on exit with the processes RPID and SPID).
WORK=$(mktemp -d)
trap 'kill $RPID ${SPID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
redis-server --port "$REDIS_PORT" --save "" --appendonly no --logfile "$WORK/redis.log" &
RPID=$!
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
# CPU ticks (utime + stime) of process $1 so far.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# µs per request: $1 ticks over $2 requests.
us_per() { echo "scale=2; $1 * 1000000 / $(getconf CLK_TCK) / $2" | bc; }
