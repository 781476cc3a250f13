#!/bin/bash
# TLS ÷ plaintext over gRPC, as in docs/benchmarks.md, "TLS": two `tollgate serve` on the
# memory store side by side, one plaintext and one with `tls_cert`/`tls_key` (an ECDSA P-256
# certificate made here by a CA made here), and `tollgate bench --grpc` against each in turn,
# kept-alive connections, per round. Also prints each run's service CPU per call (its
# utime + stime over the calls). Client and services share this machine's cores, so the
# client's own TLS costs are in the ratio too.
# Needs: a release build (cargo build --release -p tollgate-server), openssl, bc.
# Usage: crates/tollgate-server/bench/tls.sh [rounds] [seconds]   (from the repository root)
#   TOLLGATE_BEFORE=<binary>: also runs that binary (services and client) in each round, first.
#   TOLLGATE_CONCURRENCY (default 16) calls in flight; TOLLGATE_GRPC_CHANNELS (default 0: a
#   connection per call in flight) connections they share, as Envoy multiplexes its calls.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-4}
BIN=${TOLLGATE_BIN:-target/release/tollgate}
WORK=$(mktemp -d)
trap 'kill ${SPID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

cd "$WORK"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
  -out ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout tls.key -out tls.csr \
  -subj /CN=127.0.0.1 2>/dev/null
openssl x509 -req -in tls.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out tls.crt -days 2 \
  -extfile <(printf "subjectAltName=IP:127.0.0.1\n") 2>/dev/null
cd - >/dev/null
for mode in plain tls; do
  port=18580; tls=""
  if [ $mode = tls ]; then port=18590; tls="tls_cert = \"$WORK/tls.crt\"
tls_key = \"$WORK/tls.key\""; fi
  cat > "$WORK/$mode.toml" <<TOML
[server]
http = "127.0.0.1:$port"
grpc = "127.0.0.1:$((port + 1))"
$tls

[[limits]]
name = "api_user"
algorithm = "gcra"
limit = 1000000
period = "1s"
key = ["user"]
on_store_error = "allow"

[[envoy.rules]]
domain = "edge"
limit = "api_user"
descriptor = [{ key = "user", part = "user" }]
TOML
done

# One run: $1 the binary, $2 plain|tls; prints "calls/s µs-per-call".
run() {
  local bin=$1 mode=$2 url=http://127.0.0.1:18581 ca=()
  if [ "$mode" = tls ]; then url=https://127.0.0.1:18591; ca=(--cacert "$WORK/ca.pem"); fi
  "$bin" serve --config "$WORK/$mode.toml" 2>"$WORK/serve.log" &
  SPID=$!
  for _ in $(seq 50); do grep -q listening "$WORK/serve.log" 2>/dev/null && break; sleep 0.1; done
  local t0 out t1 calls rate
  t0=$(ticks $SPID)
  out=$("$bin" bench --grpc --url "$url" "${ca[@]}" --domain edge --descriptor user=u \
    -c "${TOLLGATE_CONCURRENCY:-16}" --channels "${TOLLGATE_GRPC_CHANNELS:-0}" -d "${SECS}s" |
    grep ShouldRateLimit)
  t1=$(ticks $SPID)
  kill -TERM $SPID; wait $SPID || true
  calls=$(echo "$out" | awk '{print $1}')
  rate=$(echo "$out" | sed -E 's/.*: ([0-9]+) decisions\/s.*/\1/')
  echo "$rate $(echo "scale=1; ($t1 - $t0) * 1000000 / $(getconf CLK_TCK) / $calls" | bc)"
}

builds="$BIN"
[ -n "${TOLLGATE_BEFORE:-}" ] && builds="$TOLLGATE_BEFORE $BIN"
for round in $(seq "$ROUNDS"); do
  for bin in $builds; do
    read -r p pcpu < <(run "$bin" plain)
    read -r t tcpu < <(run "$bin" tls)
    echo "round=$round build=$bin plaintext=$p/s tls=$t/s tls÷plaintext=$(echo "scale=2; $t / $p" | bc)" \
      "service_cpu_per_call_us plaintext=$pcpu tls=$tcpu"
  done
done
