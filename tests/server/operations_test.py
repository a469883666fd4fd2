#!/usr/bin/python3
"""gphash-server operated as memcached is: options and their errors, loopback by default,
-Y authentication, the connection limit, cache-mode eviction, store-mode out-of-memory (never an
eviction), SIGTERM draining and closing the pool cleanly, and a restart finding the items."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

checks = failed = 0


def check(cond, what):
    global checks, failed
    checks += 1
    failed += 0 if cond else 1
    print(("ok   " if cond else "FAIL ") + what)


stats = h.stats


def usage_errors():
    cases = [(["-p", "99999"], "--port"), (["-I", "5"], "-I"), (["-I", "abc"], "-I"), (["-U", "11211"], "-U"),
             (["-l", "0.0.0.0"], "-l"), (["-m", "0"], "--memory-limit"), (["-t", "0"], "--threads"),
             (["--mode", "store"], "--pool"), (["--engine", "tpu"], "--engine"), (["--bogus"], "bogus"),
             (["-c", "-5"], "-c"), (["--batch-period-us", "5000000"], "--batch-period-us"),
             (["--io-uring", "yes"], "--io-uring"), (["-o", "modern"], "-o"), (["-o", "hashpower=40"], "hashpower")]
    for args, name in cases:
        r = subprocess.run([h.GPHASH_SERVER, *args], capture_output=True, text=True, timeout=10)
        check(r.returncode == 2 and name in r.stderr, f"usage error {args} exits 2 naming {name}: {r.stderr.strip()[:120]!r}")


def public_bind_warns():
    # --allow-public: the option check passes with a warning; the bind to 192.0.2.1 (TEST-NET-1,
    # on no interface here) then fails, so nothing ever listens off loopback.
    r = subprocess.run([h.GPHASH_SERVER, "-l", "192.0.2.1", "--allow-public", "-p", str(h.free_port())], capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and "WARNING" in r.stderr and "without authentication" in r.stderr, "--allow-public prints a warning")


def auth():
    with tempfile.NamedTemporaryFile("w", prefix="gphash-server-auth-", suffix=".txt") as f:
        f.write("alice:secret\nbob:hunter2\n")
        f.flush()
        with h.gphash_server("-Y", f.name) as s:
            check(h.exchange(s.port, b"get a\r\n", sentinel=False) == b"CLIENT_ERROR unauthenticated\r\n", "-Y: a request before authenticating is refused")
            check(h.exchange(s.port, b"set x 0 0 10\r\nalice nope\r\nget a\r\n", sentinel=False) ==
                  b"CLIENT_ERROR authentication failure\r\nCLIENT_ERROR unauthenticated\r\n", "-Y: wrong password refused")
            check(h.exchange(s.port, b"set x 0 0 11\r\nbob hunter2\r\nset a 0 0 1\r\n1\r\nget a\r\n") ==
                  b"STORED\r\nSTORED\r\nVALUE a 0 1\r\n1\r\nEND\r\n", "-Y: authenticated, then served")
        # -Y allows a public address without --allow-public. No test listens off loopback: 192.0.2.1
        # (TEST-NET-1) is on no interface here, so the bind fails (exit 1) after the option checks.
        r = subprocess.run([h.GPHASH_SERVER, "-l", "192.0.2.1", "-Y", f.name, "-p", str(h.free_port())], capture_output=True, text=True, timeout=30)
        check(r.returncode == 1 and "cannot listen" in r.stderr and "WARNING" not in r.stderr, "-Y lifts the loopback-only rule")


def connection_limit():
    with h.gphash_server("-c", "10", "-t", "1") as s:
        # The readiness probe's connection must be gone before counting (the stats connection
        # itself is the one left).
        for _ in range(100):
            if stats(s.port).get("curr_connections") == "1":
                break
            time.sleep(0.02)
        time.sleep(0.1)
        socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(10)]
        for c in socks:
            c.sendall(b"version\r\n")
            c.recv(100)
        extra = socket.create_connection(("127.0.0.1", s.port))
        extra.settimeout(5)
        data = extra.recv(100)
        check(data == b"ERROR Too many open connections\r\n", f"-c 10: the 11th connection is refused ({data!r})")
        extra.close()
        for c in socks:
            c.close()
        time.sleep(0.2)
        check(h.exchange(s.port, b"version\r\n").startswith(b"VERSION"), "-c 10: served again once the others closed")
        check(stats(s.port).get("rejected_connections") == "1", "rejected_connections counts it")


def index_grows():
    # The index starts with room for 2^12 items (-o hashpower=12, one partition) and grows as
    # 20,000 keys come; every one is found after.
    with h.gphash_server("-o", "hashpower=12", "-t", "1") as s:
        total = 20000
        for i in range(0, total, 1000):
            h.exchange(s.port, b"".join(b"set g%d 0 0 4 noreply\r\nv%03d\r\n" % (j, j % 1000) for j in range(i, i + 1000)))
        st = stats(s.port)
        check(int(st["gphash_index_resizes"]) >= 2 and int(st["gphash_index_slots"]) >= total,
              f"the index grew ({st['gphash_index_resizes']} resizes, {st['gphash_index_slots']} slots)")
        for i in range(0, total, 500):
            r = h.exchange(s.port, b"get " + b" ".join(b"g%d" % j for j in range(i, i + 500)) + b"\r\n")
            check(r.count(b"VALUE ") == 500, f"keys g{i}.. are all there after the growth")


def cache_eviction():
    with h.gphash_server("-m", "4", "-I", "1m", "-t", "2") as s:
        value = b"x" * 1000
        total = 20000  # 20 MB of values into 4 MB
        for i in range(0, total, 500):
            data = b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (j, len(value), value) for j in range(i, i + 500))
            h.exchange(s.port, data)
        st = stats(s.port)
        check(int(st["evictions"]) > 10000, f"cache mode evicts under -m 4 (evictions {st['evictions']})")
        r = h.exchange(s.port, b"get " + b" ".join(b"k%d" % j for j in range(total - 50, total)) + b"\r\n")
        check(r.count(b"VALUE ") == 50, "the most recent items are still there")
        check(int(st["curr_items"]) < 4500 and int(st["bytes"]) <= 4 << 20, f"items fit the limit ({st['curr_items']} items, {st['bytes']} bytes)")


def store_full_and_restart():
    pool = f"gphash-server-ops-{os.getpid()}"
    files = [f"/dev/shm/{pool}.index", f"/dev/shm/{pool}.items"]
    try:
        args = ("--mode", "store", "--pool", pool, "-m", "4", "-I", "1m", "-t", "2")
        value = b"y" * 1000
        with h.gphash_server(*args) as s:
            stored = 0
            errors = 0
            for i in range(6000):
                r = h.exchange(s.port, b"set s%d 0 0 %d\r\n%s\r\n" % (i, len(value), value)) if i % 500 == 0 else None
                if r is None:
                    break
            data = b"".join(b"set s%d 0 0 %d\r\n%s\r\n" % (j, len(value), value) for j in range(6000))
            r = h.exchange(s.port, data)
            stored = r.count(b"STORED\r\n")
            errors = r.count(b"SERVER_ERROR out of memory storing object\r\n")
            check(stored > 3000 and errors > 0 and stored + errors == 6000,
                  f"store mode full: {stored} stored, then SERVER_ERROR out of memory ({errors})")
            st = stats(s.port)
            check(st["evictions"] == "0", "store mode never evicts")
            got = h.exchange(s.port, b"get " + b" ".join(b"s%d" % j for j in range(6000)) + b"\r\n")
            check(got.count(b"VALUE ") == stored, "every acknowledged item is still there")
            # A deleted item's memory is reused from the next round on (store mode frees it once the
            # round's index batch no longer lets a restart reach it).
            check(h.exchange(s.port, b"delete s0\r\n") == b"DELETED\r\n" and
                  h.exchange(s.port, b"set again 0 0 1000\r\n" + value + b"\r\n") == b"STORED\r\n", "a delete makes room for a new item")
            stored_keys = stored
        check(s.proc.returncode == 0, f"SIGTERM: exit code {s.proc.returncode}")
        err = s.stderr()
        check("pool closed cleanly" in err, "SIGTERM drains and closes the pool")
        with h.gphash_server(*args) as s2:
            got = h.exchange(s2.port, b"get again " + b" ".join(b"s%d" % j for j in range(6000)) + b"\r\n")
            check(got.count(b"VALUE ") == stored_keys, f"restart serves all {stored_keys} items")
            st = stats(s2.port)
            check(st["gphash_recovered"] == "1" and st["curr_items"] == str(stored_keys), "recovery counted the items")
    finally:
        for f in files:
            if os.path.exists(f):
                os.unlink(f)


def sigterm_drains():
    # A pipelined burst sent just before SIGTERM is answered in full before the connection closes.
    with h.gphash_server("-t", "2") as s:
        c = socket.create_connection(("127.0.0.1", s.port))
        burst = b"".join(b"set d%d 0 0 1\r\n1\r\n" % i for i in range(2000))
        c.sendall(burst)
        time.sleep(0.3)
        s.proc.send_signal(signal.SIGTERM)
        data = b""
        c.settimeout(10)
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        check(data == b"STORED\r\n" * 2000, f"SIGTERM: replies to everything read were sent ({data.count(b'STORED')}/2000), then the connection closed")


def io_uring_modes():
    # Started without mcharness's extra options: GPHASH_SERVER_ARGS may name --io-uring too.
    def start(mode):
        port = h.free_port()
        proc = subprocess.Popen([h.GPHASH_SERVER, "-p", str(port), "--io-uring", mode], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            h.wait_port(port, proc)
        except RuntimeError:
            return proc.wait(), proc.stderr.read(), None
        setting = h.stats(port, b"stats settings\r\n").get("gphash_io_uring")
        served = h.exchange(port, b"set k 0 0 2\r\nok\r\nget k\r\n") == b"STORED\r\nVALUE k 0 2\r\nok\r\nEND\r\n"
        proc.send_signal(signal.SIGTERM)
        return proc.wait(10), setting, served

    rc, setting, served = start("off")
    check(rc == 0 and setting == "off" and served, f"--io-uring off: plain recv and send calls (gphash_io_uring {setting})")
    rc, setting_on, served = start("on")
    if served is None:  # a build without liburing, or a kernel that refuses io_uring: a clear error
        check(rc == 1 and "io_uring" in setting_on, f"--io-uring on without io_uring exits 1 saying why: {setting_on.strip()[:120]!r}")
        rc, setting, served = start("auto")
        check(rc == 0 and setting == "off" and served, "--io-uring auto falls back to plain calls")
    else:
        check(rc == 0 and setting_on == "on" and served, "--io-uring on: served through io_uring")
        rc, setting, served = start("auto")
        check(rc == 0 and setting == "on" and served, "--io-uring auto uses io_uring where it works")


def main():
    usage_errors()
    index_grows()
    io_uring_modes()
    public_bind_warns()
    auth()
    connection_limit()
    cache_eviction()
    store_full_and_restart()
    sigterm_drains()
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
