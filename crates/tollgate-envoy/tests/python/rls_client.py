"""An independent Envoy RLS v3 client for tollgate's service.

Generates Python stubs with grpcio-tools from the Envoy .proto files shipped in the
envoy-types crate source (the service file and every file it imports, transitively), then
calls ShouldRateLimit and checks the answers. Exits non-zero on any mismatch.

Usage: rls_client.py --addr HOST:PORT --protos <envoy-types>/proto --out <stub dir>
                     [--unit MINUTE] [--wait-rule DOMAIN KEY LIMIT [--wait-secs 10]]

Without --wait-rule, the server must have a limit "per_user" admitting 2 per UNIT, keyed by
"user", and the rule: domain "py", descriptor [{ key = "user", part = "user" }].

With --wait-rule, it only polls (every 50 ms, for --wait-secs at most) until a descriptor
[(KEY, <fresh value>)] of DOMAIN is answered by LIMIT: a rule added by a config reload.
"""

import argparse
import importlib
import os
import re
import sys
import time

import grpc
import grpc_tools
from grpc_tools import protoc

SERVICE = "envoy/service/ratelimit/v3/rls.proto"
ROOTS = ["data-plane-api", "xds", "protoc-gen-validate", "googleapis", "cel-spec/proto"]
IMPORT = re.compile(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;', re.M)


def closure(include_dirs, builtin_dir):
    """Every .proto that SERVICE needs, found in include_dirs (well-known types excluded)."""
    todo, seen = [SERVICE], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = next((os.path.join(d, name) for d in include_dirs
                     if os.path.isfile(os.path.join(d, name))), None)
        if path is None:
            if os.path.isfile(os.path.join(builtin_dir, name)):
                seen[name] = None  # shipped with protobuf's runtime
                continue
            sys.exit(f"cannot find {name} in {include_dirs}")
        seen[name] = path
        with open(path, encoding="utf-8") as f:
            todo.extend(IMPORT.findall(f.read()))
    return sorted(n for n, p in seen.items() if p is not None)


def generate(protos, out):
    include_dirs = [os.path.join(protos, r) for r in ROOTS]
    builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    files = closure(include_dirs, builtin)
    os.makedirs(out, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{builtin}"] + [f"-I{d}" for d in include_dirs]
    args += [f"--python_out={out}", f"--grpc_python_out={out}"] + files
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    sys.path.insert(0, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--protos", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--unit", default="MINUTE", choices=["SECOND", "MINUTE", "HOUR", "DAY"])
    ap.add_argument("--wait-rule", nargs=3, metavar=("DOMAIN", "KEY", "LIMIT"))
    ap.add_argument("--wait-secs", type=float, default=10.0)
    a = ap.parse_args()
    generate(a.protos, a.out)
    rls = importlib.import_module("envoy.service.ratelimit.v3.rls_pb2")
    rls_grpc = importlib.import_module("envoy.service.ratelimit.v3.rls_pb2_grpc")
    common = importlib.import_module("envoy.extensions.common.ratelimit.v3.ratelimit_pb2")

    Code = rls.RateLimitResponse.Code
    Unit = rls.RateLimitResponse.RateLimit.Unit

    def request(domain, descriptors, hits_addend=0):
        return rls.RateLimitRequest(
            domain=domain,
            hits_addend=hits_addend,
            descriptors=[
                common.RateLimitDescriptor(entries=[
                    common.RateLimitDescriptor.Entry(key=k, value=v) for k, v in d
                ])
                for d in descriptors
            ],
        )

    checks = 0
    unit_secs = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}[a.unit]

    def expect(cond, what, resp):
        nonlocal checks
        if not cond:
            sys.exit(f"FAILED: {what}\n{resp}")
        checks += 1

    if a.wait_rule:
        domain, key, limit = a.wait_rule
        deadline = time.monotonic() + a.wait_secs
        with grpc.insecure_channel(a.addr) as channel:
            stub = rls_grpc.RateLimitServiceStub(channel)
            n = 0
            while True:
                n += 1
                r = stub.ShouldRateLimit(request(domain, [[(key, f"probe-{n}")]]), timeout=10)
                s = r.statuses[0]
                if s.HasField("current_limit") and s.current_limit.name == limit:
                    break
                if time.monotonic() > deadline:
                    sys.exit(f"FAILED: no rule of {domain!r} sent ({key!r}, ...) to {limit!r} "
                             f"within {a.wait_secs}s\n{r}")
                time.sleep(0.05)
            expect(r.overall_code == Code.OK and s.code == Code.OK, "new rule admits", r)
        print(f"rule {limit} answers after {n} calls")
        print(f"all checks passed ({checks})")
        return

    with grpc.insecure_channel(a.addr) as channel:
        stub = rls_grpc.RateLimitServiceStub(channel)
        alice = [("user", "alice")]
        r = stub.ShouldRateLimit(request("py", [alice]), timeout=10)
        expect(r.overall_code == Code.OK, "first call OK", r)
        s = r.statuses[0]
        expect(s.current_limit.name == "per_user", "limit name", r)
        expect(s.current_limit.unit == Unit.Value(a.unit), f"unit {a.unit}", r)
        expect(s.current_limit.requests_per_unit == 2, "2 per minute", r)
        expect(s.limit_remaining == 1, "1 remaining", r)
        expect(1 <= s.duration_until_reset.seconds <= unit_secs, "resets within the unit", r)

        r = stub.ShouldRateLimit(request("py", [alice]), timeout=10)
        expect(r.overall_code == Code.OK and r.statuses[0].limit_remaining == 0, "second OK", r)
        r = stub.ShouldRateLimit(request("py", [alice]), timeout=10)
        expect(r.overall_code == Code.OVER_LIMIT, "third OVER_LIMIT", r)
        expect(r.statuses[0].code == Code.OVER_LIMIT, "status OVER_LIMIT", r)
        print("third call:", Code.Name(r.overall_code))

        r = stub.ShouldRateLimit(request("py", [[("path", "/x")], [("user", "bob")]]), timeout=10)
        expect(r.overall_code == Code.OK, "unmatched + bob OK", r)
        expect(not r.statuses[0].HasField("current_limit"), "unmatched has no limit", r)
        expect(r.statuses[1].limit_remaining == 1, "bob 1 remaining", r)

        r = stub.ShouldRateLimit(request("py", [[("user", "carol")]], hits_addend=2), timeout=10)
        expect(r.overall_code == Code.OK and r.statuses[0].limit_remaining == 0, "hits_addend 2", r)
        r = stub.ShouldRateLimit(request("py", [[("user", "dave")]], hits_addend=3), timeout=10)
        expect(r.overall_code == Code.OVER_LIMIT, "hits_addend 3 > capacity 2", r)

        try:
            stub.ShouldRateLimit(request("", [alice]), timeout=10)
            expect(False, "empty domain refused", None)
        except grpc.RpcError as e:
            expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", e)

    print(f"all checks passed ({checks})")


if __name__ == "__main__":
    main()
