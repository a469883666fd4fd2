#!/usr/bin/python3
"""Store mode survives kill -9: a client pipelines sets (new keys, overwrites of hot keys) and
deletes while the server is killed with SIGKILL at a random moment; after a restart on the same
pool every acknowledged write is there (or a later write of the same key that was sent), every
value is one that was sent for its key (nothing torn), and deleted keys stay deleted."""
import glob
import os
import random
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

CYCLES = int(os.environ.get("KILL_CYCLES", "4"))


def value_for(seq):
    rnd = random.Random(seq)
    return (b"v%d:" % seq) + bytes(rnd.getrandbits(8) for _ in range(rnd.choice((1, 10, 100, 1000, 5000))))


class Writer:
    """Sends pipelined writes and matches replies to requests in order."""

    def __init__(self, port, seq_start, rnd):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.seq = seq_start
        self.rnd = rnd
        self.sent = []  # (key, value or None for delete) in send order
        self.acked = 0  # replies received so far (prefix of sent)
        self.stop = False

    def run(self):
        buf = b""
        try:
            while not self.stop:
                batch = b""
                for _ in range(32):
                    self.seq += 1
                    r = self.rnd.random()
                    if r < 0.6:
                        key, val = b"new%d" % self.seq, value_for(self.seq)
                    elif r < 0.9:
                        key, val = b"hot%d" % self.rnd.randrange(50), value_for(self.seq)
                    else:
                        key, val = b"hot%d" % self.rnd.randrange(50), None
                    self.sent.append((key, val))
                    batch += (b"delete %s\r\n" % key) if val is None else (b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val))
                self.sock.sendall(batch)
                while self.acked < len(self.sent) - 64:  # keep at most two batches in flight
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                    while b"\r\n" in buf:
                        line, buf = buf.split(b"\r\n", 1)
                        assert line in (b"STORED", b"DELETED", b"NOT_FOUND"), line
                        self.acked += 1
        except (OSError, AssertionError):
            pass


def main():
    pool = f"gphash-server-kill-{os.getpid()}"
    rnd = random.Random(int(os.environ.get("KILL_SEED", "14")))
    history = {}  # key -> list of (value or None, acked) in send order
    checks = failed = 0
    seq = 0
    try:
        for cycle in range(CYCLES):
            port = h.free_port()
            timing = ["--batch-period-us", "100"] if cycle % 2 else []  # rounds by receivers, then by the scheduler thread
            timing += ["--pipeline", "on" if cycle // 2 % 2 else "off"]  # and rounds resolved while the next one searches
            srv = h.Server([h.GPHASH_SERVER, "-p", str(port), "--mode", "store", "--pool", pool, "-m", "256", "-t", "2", *timing], port)
            w = Writer(port, seq, rnd)
            t = threading.Thread(target=w.run)
            t.start()
            time.sleep(rnd.uniform(0.3, 1.2))
            os.kill(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait()
            w.stop = True
            t.join()
            w.sock.close()
            seq = w.seq
            for i, (key, val) in enumerate(w.sent):
                history.setdefault(key, []).append((val, i < w.acked))
            print(f"cycle {cycle}: killed after {w.acked} acknowledged of {len(w.sent)} sent writes")

            # Restart on the pool and check every key ever written.
            port = h.free_port()
            with h.gphash_server("--mode", "store", "--pool", pool, "-m", "256", "-t", "2", port=port) as srv2:
                keys = list(history)
                bad = []
                served = {}
                for i in range(0, len(keys), 100):
                    part = keys[i:i + 100]
                    reply = h.exchange(port, b"get " + b" ".join(part) + b"\r\n")
                    found = parse_values(reply)
                    served.update(found)
                    for key in part:
                        ops = history[key]
                        last_acked = max((j for j, (_, acked) in enumerate(ops) if acked), default=-1)
                        # Allowed: the last acknowledged op's outcome or any later (unacknowledged) op's.
                        allowed = [ops[j][0] for j in range(max(last_acked, 0), len(ops))]
                        if last_acked == -1:
                            allowed.append(None)  # never acknowledged: may be absent
                        if found.get(key) not in allowed:
                            bad.append((key, found.get(key, None) is None))
                checks += 1
                if bad:
                    failed += 1
                    print(f"FAIL cycle {cycle}: {len(bad)} keys wrong after restart, e.g. {bad[:5]}")
                else:
                    print(f"ok   cycle {cycle}: all {len(keys)} keys hold an allowed value after kill -9 and restart")
                    # What the restart serves is durable now: the next cycle starts from it.
                    for key in keys:
                        history[key] = [(served.get(key), True)]
    finally:
        for f in glob.glob(f"/dev/shm/{pool}.*"):  # NAME.index, or NAME.part<k>of<N>.index with --partitions
            os.unlink(f)
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


def parse_values(reply):
    out = {}
    i = 0
    while True:
        j = reply.find(b"\r\n", i)
        if j < 0:
            break
        line = reply[i:j]
        if line.startswith(b"VALUE "):
            _, key, _flags, n = line.split(b" ")[:4]
            n = int(n)
            out[key] = reply[j + 2:j + 2 + n]
            i = j + 2 + n + 2
        else:
            i = j + 2
    return out


if __name__ == "__main__":
    sys.exit(main())
