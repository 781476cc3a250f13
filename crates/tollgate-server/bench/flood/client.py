"""New clients, one after another (20 ms apart): connect, POST /v1/check, time to the first
bytes of the answer (a 200). Usage: client.py HOST:PORT COUNT [SOURCE_IP].
Prints p50/p90/p99/max over all clients (a failed one counts as 99 s) and over those answered."""
import collections, socket, sys, time

host, port = sys.argv[1].rsplit(":", 1)
COUNT = int(sys.argv[2])
SRC = sys.argv[3] if len(sys.argv) > 3 else None
BODY = b'{"limit": "h", "key": {"user": "1"}}\n'
REQ = (b"POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
       b"content-length: %d\r\n\r\n" % len(BODY)) + BODY
times, errors = [], collections.Counter()
for _ in range(COUNT):
    started, step = time.monotonic(), "connect"
    try:
        s = socket.socket()
        s.settimeout(30)
        if SRC:
            s.bind((SRC, 0))
        s.connect((host, int(port)))
        step = "send"
        s.sendall(REQ)
        step = "recv"
        got = s.recv(64)
        if got.startswith(b"HTTP/1.1 200"):
            times.append(time.monotonic() - started)
        else:
            errors["answer %r" % got[:16]] += 1
            times.append(99)
        s.close()
    except Exception as e:
        errors[step + " " + type(e).__name__] += 1
        times.append(99)
    time.sleep(0.02)

def line(label, ts):
    ts = sorted(ts)
    n = len(ts)
    if not n:
        return f"{label} n=0"
    q = lambda p: ts[min(n - 1, int(n * p))] * 1000
    return (f"{label} n={n} p50={q(0.5):.1f}ms p90={q(0.9):.1f}ms p99={q(0.99):.1f}ms "
            f"max={ts[-1] * 1000:.1f}ms")

print(line("clients", times), f"errors={sum(errors.values())}", dict(errors))
print(line("answered", [t for t in times if t < 99]),
      f"over_1s={sum(1 for t in times if 1 <= t < 99)}")
