#!/usr/bin/python3
"""Scaling out (issue 13): three gphash-server instances on loopback, each serving a sharded index
(--shards 2, CPU engine), behind memcached clients' consistent hashing.

(a) pylibmc with ketama writes and reads N keys: every key is found, and the keys are spread over
    the instances (each instance's `stats` curr_items; they sum to N).
(b) nutcracker (twemproxy) with ketama in front of three fresh instances: the same through the
    proxy.
(c) One instance is killed (SIGKILL). A ketama client over the two left (what a client does once
    it has ejected the dead server) still finds every key of the survivors where it was: only the
    dead instance's keys move (they are misses, and written again they land on the survivors).
    The same through nutcracker with auto_eject_hosts.
(d) Store mode with a sharded index (NAME.index.shard0, .shard1) survives SIGKILL: after a restart
    on the same pool every acknowledged key is there; restarting with another shard count is
    refused.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

import pylibmc

NUTCRACKER = os.environ.get("NUTCRACKER", "nutcracker")
KEYS = 3000
SERVER_ARGS = ("-t", "1", "--shards", "2")

checks, failures = 0, []


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
    print(("ok   " if cond else "FAIL ") + what)


def stats(port):
    return h.stats(port, b"stats\r\nstats settings\r\n")


def key(i):
    return f"scale:{i}"


def value(i):
    return f"value-{i}-" + "x" * (i % 40)


def home_of(servers, keys):
    """The instance (index into servers) that holds each key, found by asking each one directly."""
    home = {}
    for n, s in enumerate(servers):
        direct = pylibmc.Client([f"127.0.0.1:{s.port}"])
        for k in direct.get_multi(keys):
            home[k] = n if k not in home else -1  # -1: on two instances (a failure below)
    return home


def ketama_client(servers):
    return pylibmc.Client([f"127.0.0.1:{s.port}" for s in servers], behaviors={"ketama": True})


def client_suite(servers):
    keys = [key(i) for i in range(KEYS)]
    mc = ketama_client(servers)
    failed = mc.set_multi({key(i): value(i) for i in range(KEYS)})
    check(not failed, f"pylibmc/ketama: {KEYS} sets over {len(servers)} instances")
    got = mc.get_multi(keys)
    check(got == {key(i): value(i) for i in range(KEYS)}, "pylibmc/ketama: every key is found with its value")
    items = [int(stats(s.port)["curr_items"]) for s in servers]
    check(sum(items) == KEYS, f"the instances' curr_items sum to {KEYS}: {items}")
    check(all(n > KEYS // 6 for n in items), f"ketama spreads the keys over every instance: {items}")
    check(all(stats(s.port)["gphash_index_shards"] == "2" for s in servers), "each instance serves a 2-shard index")
    home = home_of(servers, keys)
    check(len(home) == KEYS and all(n >= 0 for n in home.values()), "each key is on exactly one instance")

    # (c) kill one instance; a ketama client over the two left.
    dead = 1
    servers[dead].kill()
    left = [s for n, s in enumerate(servers) if n != dead]
    mc2 = ketama_client(left)
    got = mc2.get_multi(keys)
    survivors = [k for k in keys if home[k] != dead]
    lost = [k for k in keys if home[k] == dead]
    check(all(got.get(k) == value(int(k.split(":")[1])) for k in survivors),
          f"after a kill: all {len(survivors)} keys of the survivors are still found where they were")
    check(not any(k in got for k in lost), f"after a kill: the dead instance's {len(lost)} keys are misses")
    mc2.set_multi({k: "again" for k in lost})
    home2 = home_of(left, lost)
    check(len(home2) == len(lost) and mc2.get_multi(lost) == {k: "again" for k in lost},
          "the dead instance's keys, written again, land on the survivors")
    moved = sum(1 for k in survivors if mc2.get(k) is None)
    check(moved == 0, f"no key of a survivor was remapped ({moved} were)")


def nutcracker_suite(servers, tmp):
    port, stats_port = h.free_port(), h.free_port()
    conf = os.path.join(tmp, "nutcracker.yml")
    with open(conf, "w") as f:
        f.write(f"""scale:
  listen: 127.0.0.1:{port}
  hash: fnv1a_64
  distribution: ketama
  timeout: 1000
  auto_eject_hosts: true
  server_failure_limit: 1
  server_retry_timeout: 600000
  servers:
""" + "".join(f"   - 127.0.0.1:{s.port}:1 s{n}\n" for n, s in enumerate(servers)))
    proxy = subprocess.Popen([NUTCRACKER, "-c", conf, "-s", str(stats_port), "-a", "127.0.0.1",
                              "-o", os.path.join(tmp, "log"), "-p", os.path.join(tmp, "pid")])
    try:
        h.wait_port(port, proxy)
        keys = [key(i) for i in range(KEYS)]
        mc = pylibmc.Client([f"127.0.0.1:{port}"])  # one server to the client: the proxy routes
        failed = mc.set_multi({key(i): value(i) for i in range(KEYS)})
        check(not failed, f"nutcracker/ketama: {KEYS} sets through the proxy")
        got = {}
        for i in range(0, KEYS, 200):
            got.update(mc.get_multi(keys[i:i + 200]))
        check(got == {key(i): value(i) for i in range(KEYS)}, "nutcracker/ketama: every key is found through the proxy")
        items = [int(stats(s.port)["curr_items"]) for s in servers]
        check(sum(items) == KEYS and all(n > KEYS // 6 for n in items),
              f"nutcracker/ketama: the keys are spread over every instance: {items}")
        home = home_of(servers, keys)
        check(len(home) == KEYS and all(n >= 0 for n in home.values()), "nutcracker: each key is on exactly one instance")

        dead = 2
        servers[dead].kill()
        lost = [k for k in keys if home[k] == dead]
        survivors = [k for k in keys if home[k] != dead]
        # The proxy ejects the dead instance at its first failure; requests until then may fail.
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                mc.get(lost[0])
                break
            except pylibmc.Error:
                time.sleep(0.2)
        got = {}
        for i in range(0, len(survivors), 200):
            got.update(mc.get_multi(survivors[i:i + 200]))
        check(len(got) == len(survivors), f"nutcracker after a kill: {len(got)} of the survivors' {len(survivors)} keys found")
        missing = {}
        for i in range(0, len(lost), 200):
            missing.update(mc.get_multi(lost[i:i + 200]))
        check(not missing, f"nutcracker after a kill: the dead instance's {len(lost)} keys are misses")
        mc.set_multi({k: "again" for k in lost})
        check(all(mc.get(k) == "again" for k in lost), "nutcracker: the dead instance's keys, written again, are found")
    finally:
        proxy.terminate()
        proxy.wait(10)


def store_suite():
    pool = f"gphash-scale-out-{os.getpid()}"
    files = [f"/dev/shm/{pool}.index.shard{k}" for k in range(2)]  # the items live in shard 0's pool
    port = h.free_port()
    try:
        srv = h.Server([h.GPHASH_SERVER, "-p", str(port), "--mode", "store", "--pool", pool, "--shards", "2", "-t", "1"], port)
        mc = pylibmc.Client([f"127.0.0.1:{port}"])
        failed = mc.set_multi({key(i): value(i) for i in range(KEYS)})
        srv.proc.kill()  # SIGKILL: the index shards stay marked open
        srv.proc.wait()
        check(not failed and all(os.path.exists(f) for f in files), "store mode: two index shards (the items in shard 0's pool)")
        with h.gphash_server("--mode", "store", "--pool", pool, "--shards", "2", "-t", "1", port=port) as again:
            mc = pylibmc.Client([f"127.0.0.1:{again.port}"])
            got = {}
            for i in range(0, KEYS, 500):
                got.update(mc.get_multi([key(j) for j in range(i, min(i + 500, KEYS))]))
            check(got == {key(i): value(i) for i in range(KEYS)}, f"store mode: all {KEYS} keys back after kill -9 and a restart")
        wrong = subprocess.run([h.GPHASH_SERVER, "-p", str(h.free_port()), "--mode", "store", "--pool", pool, "--shards", "3"],
                               capture_output=True, text=True, timeout=30)
        check(wrong.returncode != 0 and "shard" in wrong.stderr, f"store mode: another shard count is refused ({wrong.stderr.strip()})")
    finally:
        for f in files:
            if os.path.exists(f):
                os.unlink(f)


def main():
    with h.gphash_server(*SERVER_ARGS) as a, h.gphash_server(*SERVER_ARGS) as b, h.gphash_server(*SERVER_ARGS) as c:
        client_suite([a, b, c])
    with h.gphash_server(*SERVER_ARGS) as a, h.gphash_server(*SERVER_ARGS) as b, h.gphash_server(*SERVER_ARGS) as c, \
            tempfile.TemporaryDirectory(prefix="gphash-scale-out-") as tmp:
        nutcracker_suite([a, b, c], tmp)
    store_suite()
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
