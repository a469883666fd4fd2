#!/usr/bin/python3
"""Store mode survives a reboot through snapshots: gphash-server --snapshot FILE takes automatic
snapshots of its pool (index and items in one consistent image). After kill -9 and the loss of
/dev/shm (emulated by removing the pool), a restart with the same --snapshot restores the last
snapshot: every item acknowledged before it is there with its value, deleted items stay deleted,
and items written after it are either absent or intact. A clean stop takes a last snapshot, so it
loses nothing; `gphash snapshot` and `gphash restore` move such a pool to another name; a damaged
snapshot file is refused at start with an error and creates no pool."""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

GPHASH = os.environ.get("GPHASH_CLI", "gphash")
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures += 1


def value_for(key, rnd):
    return key + b":" + bytes(rnd.getrandbits(8) for _ in range(rnd.choice((1, 50, 700, 4000))))


def set_many(port, items):
    data = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v) for k, v in items)
    r = h.exchange(port, data)
    return r.count(b"STORED\r\n")


def get_all(port, keys):
    found = {}
    for at in range(0, len(keys), 200):
        r = h.exchange(port, b"get " + b" ".join(keys[at:at + 200]) + b"\r\n")
        rest = r
        while rest.startswith(b"VALUE "):
            header, rest = rest.split(b"\r\n", 1)
            _, key, _, length = header.split(b" ")
            n = int(length)
            found[key] = rest[:n]
            rest = rest[n + 2:]
    return found


def wait_for_snapshot(port, timeout=20.0):
    """Until a snapshot has captured every write so far."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = h.stats(port)
        if int(st.get("gphash_snapshots_taken", "0")) > 0 and st.get("gphash_snapshot_writes_since") == "0":
            return st
        time.sleep(0.1)
    return h.stats(port)


def run(pipeline):
    """Every step below with rounds one at a time (--pipeline off) or pipelined (on): a pipelined
    store drains when a snapshot waits, so its snapshots are taken while writes keep coming."""
    pool = f"gphash-server-snap-{pipeline}-{os.getpid()}"
    moved = pool + "-moved"
    shm = [f"/dev/shm/{p}.index" for p in (pool, moved)]
    tmp = tempfile.mkdtemp(prefix="gphash-server-snap-", dir="/tmp")  # a real file system, not /dev/shm
    snap = os.path.join(tmp, "store.snap")
    rnd = random.Random(11)
    engine = ("--engine", os.environ["GPHASH_SERVER_ENGINE"]) if os.environ.get("GPHASH_SERVER_ENGINE") else ()  # gpu on a GPU machine
    args = ("--mode", "store", "--pool", pool, "-m", "64", "-t", "2", *engine, "--pipeline", pipeline,
            "--snapshot", snap, "--snapshot-every-seconds", "0.2")
    try:
        # 1. Writes, a snapshot that covers them, more writes, then kill -9 and a "reboot".
        model = {}
        with h.gphash_server(*args) as s:
            items = [(b"k%d" % i, value_for(b"k%d" % i, rnd)) for i in range(3000)]
            check(set_many(s.port, items) == len(items), "3000 sets acknowledged")
            model.update(items)
            gone = [b"k%d" % i for i in range(0, 3000, 7)]
            r = h.exchange(s.port, b"".join(b"delete %s\r\n" % k for k in gone))
            check(r.count(b"DELETED\r\n") == len(gone), f"{len(gone)} deletes acknowledged")
            for k in gone:
                del model[k]
            st = wait_for_snapshot(s.port)
            check(st.get("gphash_snapshot_writes_since") == "0" and st.get("gphash_snapshot_error") == "none",
                  f"an automatic snapshot covers them (taken {st.get('gphash_snapshots_taken')})")
            late = [(b"late%d" % i, value_for(b"late%d" % i, rnd)) for i in range(500)]
            set_many(s.port, late)
            s.kill()
        os.unlink(f"/dev/shm/{pool}.index")  # what a reboot does to /dev/shm
        check(not os.path.exists(f"/dev/shm/{pool}.items"), "no separate item file: the items live in the pool")

        with h.gphash_server(*args) as s:
            got = get_all(s.port, list(model) + gone)
            check(all(got.get(k) == v for k, v in model.items()), f"restored from the snapshot: all {len(model)} items, exact values")
            check(not any(k in got for k in gone), "deleted items stay deleted")
            late_got = get_all(s.port, [k for k, _ in late])
            check(all(late_got[k] == v for k, v in late if k in late_got),
                  f"writes after the snapshot: {len(late_got)} of {len(late)} survived, none torn")
            model.update((k, v) for k, v in late if k in late_got)
            st = h.stats(s.port)
            check(st["curr_items"] == str(len(model)), f"the store counts {st['curr_items']} items, expected {len(model)}")
            # 2. A clean stop takes a last snapshot.
            clean = [(b"clean%d" % i, value_for(b"clean%d" % i, rnd)) for i in range(300)]
            check(set_many(s.port, clean) == len(clean), "300 more sets")
            model.update(clean)
        os.unlink(f"/dev/shm/{pool}.index")
        with h.gphash_server(*args) as s:
            got = get_all(s.port, list(model))
            check(len(got) == len(model) and all(got[k] == v for k, v in model.items()),
                  f"after a clean stop and a reboot: all {len(model)} items")

        # 3. The CLI's snapshot and restore carry the items too.
        snap2 = os.path.join(tmp, "cli.snap")
        r = subprocess.run([GPHASH, "snapshot", pool + ".index", snap2], capture_output=True, text=True)
        check(r.returncode == 0, f"gphash snapshot of a stopped server's pool ({r.stderr.strip()[:200]})")
        r = subprocess.run([GPHASH, "restore", snap2, moved + ".index"], capture_output=True, text=True)
        check(r.returncode == 0, f"gphash restore under another name ({r.stderr.strip()[:200]})")
        with h.gphash_server("--mode", "store", "--pool", moved, "-m", "64", "-t", "2", *engine) as s:
            got = get_all(s.port, list(model))
            check(len(got) == len(model) and all(got[k] == v for k, v in model.items()),
                  "a server on the restored copy serves every item")

        # 4. A damaged snapshot file is refused, and nothing is created.
        os.unlink(f"/dev/shm/{pool}.index")
        with open(snap, "r+b") as f:
            f.truncate(os.path.getsize(snap) // 2)
        port = h.free_port()
        p = subprocess.run([h.GPHASH_SERVER, "-p", str(port), *args], capture_output=True, text=True, timeout=60)
        check(p.returncode == 1 and "snapshot" in p.stderr.lower(),
              f"a truncated snapshot file is refused at start ({p.stderr.strip()[:200]})")
        check(not os.path.exists(f"/dev/shm/{pool}.index"), "and no pool is created")
    finally:
        for f in shm:
            if os.path.exists(f):
                os.unlink(f)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    for pipeline in ("off", "on"):
        print(f"-- --pipeline {pipeline}")
        run(pipeline)
    print("store_snapshot_test: " + ("PASSED" if failures == 0 else f"FAILED ({failures})"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
