#!/usr/bin/python3
"""gphash-server --partitions N: the keys split by hash over N stores, each with its own round
pipeline. From the outside nothing may change but the CAS values: one connection's pipelined
requests over keys of every partition answer as memcached answers them (byte for byte, against
Debian's memcached), multi-gets gather their keys from every partition in order, flush_all empties
them all, stats add them up, CAS values stay unique; in store mode each partition keeps its own
pool (NAME.part<k>of<N>) and snapshot, and a pool is opened only with the number that wrote it (the
default when none is given). The defaults: a cache gets one partition per receiver, a new store one."""
import glob
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

checks = failed = 0


def check(cond, what):
    global checks, failed
    checks += 1
    failed += 0 if cond else 1
    print(("ok   " if cond else "FAIL ") + what)


def random_session(seed, n=3000, keys=150):
    """Pipelined text and meta commands over `keys` keys (every partition); no CAS values or
    times are shown, which differ by design or by the clock."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        k = b"key%d" % rnd.randrange(keys)
        r = rnd.random()
        if r < 0.3:
            out.append(b"get " + b" ".join(b"key%d" % rnd.randrange(keys) for _ in range(rnd.choice((1, 2, 7, 40)))))
        elif r < 0.55:
            v = b"%d" % rnd.randrange(10**rnd.randrange(1, 8))
            verb = rnd.choice((b"set", b"set", b"add", b"replace", b"append", b"prepend"))
            out.append(b"%s %s %d 0 %d\r\n%s" % (verb, k, rnd.randrange(100), len(v), v))
        elif r < 0.7:
            out.append(b"delete " + k)
        elif r < 0.85:
            # No decr: memcached pads a shorter result in place or not depending on whether a
            # reply still holds the item, a race a pipelined session does not pin down.
            out.append(b"incr %s %d" % (k, rnd.randrange(1000)))
        elif r < 0.95:
            out.append(b"touch %s %d" % (k, rnd.choice((0, 100))))
        else:
            out.append(b"mg %s v f k Oq%d" % (k, rnd.randrange(100)))
    return b"".join(c + b"\r\n" for c in out)


def same_answers_as_memcached():
    with h.memcached("-t", "2") as mc, h.gphash_server("-t", "3", "--partitions", "4") as gp:
        for seed in (1, 2, 3):
            data = random_session(seed)
            want, got = h.exchange(mc.port, data), h.exchange(gp.port, data)
            check(want == got and len(want) > 10000, f"seed {seed}: 3000 pipelined requests over 4 partitions answer as memcached's ({len(got)} bytes)")
            if want != got:
                i = next(i for i in range(min(len(want), len(got))) if want[i] != got[i])
                print(f"  first difference at byte {i}: memcached {want[i-80:i+80]!r}\n  gphash    {got[i-80:i+80]!r}")
        h.exchange(mc.port, b"flush_all\r\n")
        h.exchange(gp.port, b"flush_all\r\n")


def defaults():
    with h.gphash_server("-t", "3") as s:
        check(h.stats(s.port, b"stats settings\r\n").get("gphash_partitions") == "3", "a cache: one partition per receiver (-t 3)")
    with h.gphash_server("-t", "8", "-m", "8") as s:
        check(h.stats(s.port, b"stats settings\r\n").get("gphash_partitions") == "4", "... while each holds two of the largest items (-m 8: 4)")
    pool = f"gphash-partitions-new-{os.getpid()}"
    try:
        with h.gphash_server("--mode", "store", "--pool", pool, "-t", "4") as s:
            check(h.stats(s.port, b"stats settings\r\n").get("gphash_partitions") == "1", "a new store: one partition")
    finally:
        for f in glob.glob(f"/dev/shm/{pool}*"):
            os.unlink(f)


def cache_mode(pipeline="off"):
    print(f"-- --pipeline {pipeline}")
    with h.gphash_server("-t", "3", "--partitions", "4", "--pipeline", pipeline) as s:
        keys = [b"k%d" % i for i in range(400)]
        h.exchange(s.port, b"".join(b"set %s %d 0 %d noreply\r\n%s\r\n" % (k, i, len(k) * 2, k * 2) for i, k in enumerate(keys)))
        st = h.stats(s.port)
        check(st.get("curr_items") == "400", f"curr_items adds the partitions up: {st.get('curr_items')}")
        items = h.stats(s.port, b"stats items\r\n")
        check(sum(int(v) for k, v in items.items() if k.endswith(":number")) == 400, "stats items adds the partitions up")
        check(h.stats(s.port, b"stats settings\r\n").get("gphash_partitions") == "4", "stats settings: gphash_partitions 4")
        want = b"".join(b"VALUE %s %d %d\r\n%s\r\n" % (k, i, len(k) * 2, k * 2) for i, k in enumerate(keys[:100])) + b"END\r\n"
        check(h.exchange(s.port, b"get " + b" ".join(keys[:100]) + b"\r\n") == want, "a multi-get of 100 keys answers in request order from every partition")
        reply = h.exchange(s.port, b"gets " + b" ".join(keys) + b"\r\n")
        cas = [int(line.split()[4]) for line in reply.split(b"\r\n") if line.startswith(b"VALUE ")]
        check(len(cas) == 400 and len(set(cas)) == 400, f"400 items, 400 distinct CAS values ({len(set(cas))})")
        check(h.exchange(s.port, b"cas k7 0 0 1 %d\r\nx\r\ncas k8 0 0 1 %d\r\ny\r\n" % (cas[7], cas[7])) == b"STORED\r\nEXISTS\r\n",
              "cas with the item's value stores; with another item's value, EXISTS")
        check(h.exchange(s.port, b"flush_all\r\nget " + b" ".join(keys) + b"\r\n") == b"OK\r\nEND\r\n", "flush_all answers once and empties every partition")


def run(*args):
    return subprocess.run([h.GPHASH_SERVER, "-p", str(h.free_port()), *args], capture_output=True, text=True, timeout=60)


def store_mode():
    pool = f"gphash-partitions-{os.getpid()}"
    snapdir = tempfile.mkdtemp(prefix="gphash-partitions-")
    snap = os.path.join(snapdir, "kv.snap")

    def cleanup():
        for f in glob.glob(f"/dev/shm/{pool}*"):
            os.unlink(f)

    cleanup()
    try:
        args = ("--mode", "store", "--pool", pool, "--partitions", "3", "-t", "2", "--snapshot", snap)
        data = b"".join(b"set p%d 0 0 5 noreply\r\nv%04d\r\n" % (i, i) for i in range(300))
        with h.gphash_server(*args) as s:
            h.exchange(s.port, data)
        files = sorted(os.path.basename(f) for f in glob.glob(f"/dev/shm/{pool}*"))
        check(files == [f"{pool}.part{k}of3.index" for k in range(3)], f"one pool per partition: {files}")
        snaps = sorted(os.path.basename(f) for f in glob.glob(snap + "*"))
        check(snaps == [f"kv.snap.part{k}of3" for k in range(3)], f"one snapshot per partition: {snaps}")
        want = b"".join(b"VALUE p%d 0 5\r\nv%04d\r\n" % (i, i) for i in range(300)) + b"END\r\n"
        get_all = b"get " + b" ".join(b"p%d" % i for i in range(300)) + b"\r\n"
        with h.gphash_server(*args) as s:
            check(h.exchange(s.port, get_all) == want, "after a restart every item is back")
        for other in ("1", "2", "4"):
            r = run("--mode", "store", "--pool", pool, "--partitions", other)
            check(r.returncode == 1 and "written by 3 partitions: start with --partitions 3" in r.stderr,
                  f"--partitions {other} on a pool of 3 is refused: {r.stderr.strip()[:100]!r}")
        with h.gphash_server("--mode", "store", "--pool", pool, "-t", "2") as s:
            check(h.exchange(s.port, get_all) == want, "without --partitions the pool's own number is used")
            check(h.stats(s.port, b"stats settings\r\n").get("gphash_partitions") == "3", "... and stats settings says 3")
        for f in glob.glob(f"/dev/shm/{pool}*"):
            os.unlink(f)  # what a reboot does to /dev/shm: each partition comes back from its snapshot
        with h.gphash_server(*args) as s:
            check(h.exchange(s.port, get_all) == want, "every partition restored from its snapshot")
        os.unlink(f"/dev/shm/{pool}.part2of3.index")
        os.unlink(snap + ".part2of3")
        r = run("--mode", "store", "--pool", pool, "-t", "2")  # the last one gone: still refused
        check(r.returncode == 1 and "partition 2 of 3 is missing" in r.stderr, f"a pool with a partition missing is refused: {r.stderr.strip()[:100]!r}")
    finally:
        cleanup()
        for f in glob.glob(os.path.join(snapdir, "*")):
            os.unlink(f)
        os.rmdir(snapdir)


def usage():
    for args in (["--partitions", "0"], ["--partitions", "65"], ["-m", "4", "--partitions", "3"]):
        r = run(*args)
        check(r.returncode == 2 and "--partitions" in r.stderr, f"usage error {args}: {r.stderr.strip()[:100]!r}")


def main():
    usage()
    defaults()
    same_answers_as_memcached()
    cache_mode("off")
    cache_mode("on")  # a pipelined store resolves its last round after the round's call: stats still see it
    store_mode()
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
