#!/usr/bin/python3
"""nutcracker (twemproxy) with ketama in front of three gphash-server instances: writes and reads
through the proxy, multi-gets the proxy splits across shards, and every key is on exactly the one
shard ketama chose (checked on each server directly)."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

NUTCRACKER = os.environ.get("NUTCRACKER", "nutcracker")
KEYS = 600


def main():
    checks, failed = 0, 0

    def check(cond, what):
        nonlocal checks, failed
        checks += 1
        failed += 0 if cond else 1
        print(("ok   " if cond else "FAIL ") + what)

    with h.gphash_server("-t", "1") as a, h.gphash_server("-t", "1") as b, h.gphash_server("-t", "1") as c, \
            tempfile.TemporaryDirectory(prefix="gphash-server-nutcracker-") as tmp:
        port, stats_port = h.free_port(), h.free_port()
        conf = os.path.join(tmp, "nutcracker.yml")
        with open(conf, "w") as f:
            f.write(f"""gphash:
  listen: 127.0.0.1:{port}
  hash: fnv1a_64
  distribution: ketama
  timeout: 2000
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:{a.port}:1 a
   - 127.0.0.1:{b.port}:1 b
   - 127.0.0.1:{c.port}:1 c
""")
        proxy = subprocess.Popen([NUTCRACKER, "-c", conf, "-s", str(stats_port), "-a", "127.0.0.1", "-o", os.path.join(tmp, "log"),
                                  "-p", os.path.join(tmp, "pid")])
        try:
            h.wait_port(port, proxy)
            sets = b"".join(b"set key%d 0 0 %d\r\n%s\r\n" % (i, len(b"value%d" % i), b"value%d" % i) for i in range(KEYS))
            reply = h.exchange(port, sets, sentinel=False, idle=1.0)
            check(reply == b"STORED\r\n" * KEYS, f"{KEYS} sets through the proxy")
            keys = [b"key%d" % i for i in range(KEYS)]
            got = b""
            for i in range(0, KEYS, 100):  # multi-gets of 100 keys, split by the proxy over shards
                got += h.exchange(port, b"get " + b" ".join(keys[i:i + 100]) + b"\r\n", sentinel=False, idle=1.0)
            check(got.count(b"VALUE ") == KEYS and all(b"VALUE key%d 0 " % i in got for i in range(KEYS)),
                  "multi-gets through the proxy return every key")
            on_shard = []
            for s in (a, b, c):
                r = h.exchange(s.port, b"get " + b" ".join(keys) + b"\r\n")
                on_shard.append(r.count(b"VALUE "))
            check(sum(on_shard) == KEYS, f"each key is on exactly one shard ({on_shard})")
            check(all(n > KEYS // 10 for n in on_shard), "ketama used every shard")
            r = h.exchange(port, b"incr ctr 1\r\nset ctr 0 0 1\r\n5\r\nincr ctr 10\r\ndelete key1\r\nget key1\r\n", sentinel=False, idle=1.0)
            check(r == b"NOT_FOUND\r\nSTORED\r\n15\r\nDELETED\r\nEND\r\n", f"incr/delete through the proxy: {r!r}")
        finally:
            proxy.terminate()
            proxy.wait(10)
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
