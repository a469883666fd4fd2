#!/usr/bin/python3
"""Real clients against gphash-server: pymemcache (pure Python) and pylibmc (libmemcached), with
Debian's python3. get/set/cas/incr/decr/multi-get/delete/touch, noreply writes (pymemcache's
default), and ketama distribution over two servers with pylibmc."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

import pylibmc
from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient

failures = []


def check(cond, what):
    if cond:
        print(f"ok   {what}")
    else:
        failures.append(what)
        print(f"FAIL {what}")


def pymemcache_suite(port):
    c = Client(("127.0.0.1", port), default_noreply=False)
    check(c.set("k1", b"v1") is True, "pymemcache set")
    check(c.get("k1") == b"v1", "pymemcache get")
    check(c.get("missing") is None, "pymemcache get miss")
    check(c.add("k1", b"x") is False and c.add("k2", b"v2") is True, "pymemcache add")
    check(c.replace("k3", b"x") is False and c.replace("k2", b"v2b") is True, "pymemcache replace")
    check(c.get_many(["k1", "k2", "nope"]) == {"k1": b"v1", "k2": b"v2b"}, "pymemcache get_many")
    value, cas = c.gets("k1")
    check(value == b"v1" and cas is not None, "pymemcache gets")
    check(c.cas("k1", b"v1b", cas) is True, "pymemcache cas match")
    check(c.cas("k1", b"v1c", cas) is False, "pymemcache cas stale")
    check(c.get("k1") == b"v1b", "pymemcache value after cas")
    c.set("n", b"10")
    check(c.incr("n", 5) == 15 and c.decr("n", 20) == 0, "pymemcache incr/decr")
    check(c.incr("nope", 1) is None, "pymemcache incr miss")
    check(c.append("k2", b"+") and c.prepend("k2", b"-") and c.get("k2") == b"-v2b+", "pymemcache append/prepend")
    check(c.touch("k2", 100) is True and c.touch("nope", 1) is False, "pymemcache touch")
    check(c.delete("k2") is True and c.get("k2") is None, "pymemcache delete")
    big = os.urandom(500_000)
    check(c.set("big", big) and c.get("big") == big, "pymemcache 500 KB value")
    # Writes with noreply (pymemcache's default), then a read on the same connection.
    q = Client(("127.0.0.1", port))
    for i in range(200):
        q.set(f"nr{i}", str(i).encode())
    check(q.get_many([f"nr{i}" for i in range(200)]) == {f"nr{i}": str(i).encode() for i in range(200)}, "pymemcache noreply sets then get_many of 200")
    check(c.version().startswith(b"1.6"), "pymemcache version")
    stats = c.stats()
    check(stats.get(b"curr_items", 0) > 0 and b"evictions" in stats, "pymemcache stats")
    c.flush_all()
    check(c.get("k1") is None, "pymemcache flush_all")
    c.close()
    q.close()


def pylibmc_suite(ports):
    mc = pylibmc.Client([f"127.0.0.1:{p}" for p in ports], behaviors={"ketama": True, "cas": True})
    check(mc.set("a", "alpha") and mc.get("a") == "alpha", "pylibmc set/get")
    mc.set_multi({f"key{i}": i for i in range(500)})
    got = mc.get_multi([f"key{i}" for i in range(500)])
    check(got == {f"key{i}": i for i in range(500)}, "pylibmc set_multi/get_multi of 500 over ketama")
    mc.set("n", 1)
    check(mc.incr("n", 41) == 42 and mc.decr("n", 2) == 40, "pylibmc incr/decr")
    value, cas = mc.gets("a")
    check(value == "alpha" and mc.cas("a", "beta", cas) and not mc.cas("a", "gamma", cas), "pylibmc gets/cas")
    check(mc.get("a") == "beta", "pylibmc value after cas")
    check(mc.add("a", "x") is False and mc.delete("a") and mc.get("a") is None, "pylibmc add/delete")
    check(mc.get("missing") is None, "pylibmc miss")
    obj = {"list": [1, 2, 3], "text": "é"}
    check(mc.set("obj", obj) and mc.get("obj") == obj, "pylibmc pickled object")
    if len(ports) > 1:
        per_server = []
        for p in ports:
            single = pylibmc.Client([f"127.0.0.1:{p}"])
            per_server.append(sum(1 for i in range(500) if single.get(f"key{i}") is not None))
        check(sum(per_server) == 500 and all(n > 50 for n in per_server), f"ketama spreads the keys over the servers: {per_server}")


def hashclient_suite(ports):
    hc = HashClient([("127.0.0.1", p) for p in ports], use_pooling=True)
    for i in range(300):
        hc.set(f"h{i}", f"v{i}", noreply=False)
    check(all(hc.get(f"h{i}") == f"v{i}".encode() for i in range(300)), "pymemcache HashClient over two servers")
    hc.close()


def main():
    with h.gphash_server() as a, h.gphash_server("-t", "2", "--batch-period-us", "300", "--batch-size", "32", "--pipeline", "on") as b:
        pymemcache_suite(a.port)
        pylibmc_suite([a.port, b.port])
        hashclient_suite([a.port, b.port])
    print(f"{checks_run - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


checks_run = 0
_check = check


def check(cond, what):  # noqa: F811 - counts the checks
    global checks_run
    checks_run += 1
    _check(cond, what)


if __name__ == "__main__":
    sys.exit(main())
