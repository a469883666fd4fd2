#!/usr/bin/python3
"""1,000 connections at once, and a client that sends without reading: the server stays up, keeps
serving others, and its memory stays bounded (RSS measured from /proc). A reply larger than the
connection's buffer limit: the replies after it are still sent. quit after more than the socket
takes at once, or after the client shut down its sending side: all of it is sent before the
connection closes."""
import collections
import os
import re
import resource
import selectors
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

checks = failed = 0


def check(cond, what):
    global checks, failed
    checks += 1
    failed += 0 if cond else 1
    print(("ok   " if cond else "FAIL ") + what)


def thousand_connections():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))  # the server inherits it
    with h.gphash_server("-c", "2000", "-t", "4") as s:
        conns = []
        for i in range(1000):
            c = socket.create_connection(("127.0.0.1", s.port))
            c.setblocking(False)
            conns.append(c)
        for i, c in enumerate(conns):
            c.send(b"set c%d 0 0 %d\r\n%d\r\nget c%d\r\n" % (i, len(str(i)), i, i))
        want = [b"STORED\r\nVALUE c%d 0 %d\r\n%d\r\nEND\r\n" % (i, len(str(i)), i) for i in range(1000)]
        got = [b""] * 1000
        sel = selectors.DefaultSelector()
        for i, c in enumerate(conns):
            sel.register(c, selectors.EVENT_READ, i)
        deadline = time.time() + 30
        pending = 1000
        while pending and time.time() < deadline:
            for key, _ in sel.select(1.0):
                i = key.data
                got[i] += key.fileobj.recv(4096)
                if got[i] == want[i]:
                    sel.unregister(key.fileobj)
                    pending -= 1
        check(pending == 0, f"1,000 connections each set and got their key ({1000 - pending} answered)")
        st = h.exchange(s.port, b"stats\r\n")
        check(b"STAT curr_connections 1001\r\n" in st, "curr_connections is 1001")
        rss = s.rss_kib()
        print(f"     server RSS with 1,000 connections: {rss / 1024:.1f} MiB")
        for c in conns:
            c.close()


def connections_spread_over_workers():
    """New connections go to the workers in turn, as memcached's dispatcher hands them out: 40 opened
    at once on -t 4 are about 10 a worker (the -v log names each one's worker in its id's top 16
    bits). The worker that accept() woke used to take them all."""
    with h.gphash_server("-t", "4", "-v") as s:
        conns = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(40)]
        for c in conns:
            c.sendall(b"version\r\n")
        for c in conns:
            c.settimeout(10)
            c.recv(100)  # answered: the connection is its worker's
        # The harness's port probe came first: 41 connections, 10 or 11 a worker.
        per_worker = collections.Counter(int(m) >> 48 for m in re.findall(r"new connection (\d+)", s.stderr()))
        counts = [per_worker[w] for w in range(4)]
        check(sum(counts) == 41 and max(counts) - min(counts) <= 1, f"40 connections spread over 4 workers ({counts})")
        for c in conns:
            c.close()


def sender_that_never_reads():
    value = b"v" * 100_000
    with h.gphash_server("-t", "2", "-m", "64") as s:
        h.exchange(s.port, b"set big 0 0 %d\r\n%s\r\n" % (len(value), value))
        base = s.rss_kib()
        hog = socket.create_connection(("127.0.0.1", s.port))
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.setblocking(False)
        request = b"get big big big big big big big big big big\r\n"  # 1 MB of reply per request
        sent = 0
        deadline = time.time() + 8
        peak = base
        while time.time() < deadline:
            try:
                sent += hog.send(request * 1000)
            except BlockingIOError:
                time.sleep(0.05)  # the server stopped reading from us: that is the point
            peak = max(peak, s.rss_kib())
        asked = sent // len(request)
        # Meanwhile another client is served.
        t0 = time.time()
        other = h.exchange(s.port, b"set x 0 0 1\r\n1\r\nget x\r\n")
        latency = time.time() - t0
        peak = max(peak, s.rss_kib())
        check(other == b"STORED\r\nVALUE x 0 1\r\n1\r\nEND\r\n", f"another client is served while one never reads ({latency * 1000:.1f} ms)")
        growth = (peak - base) / 1024
        print(f"     the silent client sent {asked} requests ({asked} MB of replies); server RSS grew {growth:.1f} MiB (base {base / 1024:.1f} MiB)")
        check(asked > 10_000, "the silent client sent requests for far more than the limit")
        check(growth < 48, f"server memory stays bounded (+{growth:.1f} MiB < 48 MiB)")
        st = h.exchange(s.port, b"stats\r\n")
        check(b"STAT gphash_reads_paused " in st and b"STAT gphash_reads_paused 0\r\n" not in st, "the server paused reading from it")
        hog.close()
        time.sleep(0.3)
        check(h.exchange(s.port, b"version\r\n").startswith(b"VERSION"), "the server is up after the client left")


def read_to_eof(sock, timeout, until=None, slow=False):
    """Every byte until the server closes, plus b"<closed>"; or the bytes `until` once they came;
    or, after `timeout` s, what came and b"<timeout>". `slow`: small reads with pauses, so the
    server's writes keep finding the socket full."""
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        sock.settimeout(max(0.01, deadline - time.time()))
        try:
            chunk = sock.recv(4096 if slow else 1 << 20)
        except socket.timeout:
            break
        if not chunk:
            return out + b"<closed>"
        out += chunk
        if out == until:
            return out
        if slow:
            time.sleep(0.0005)
    return out + b"<timeout>"


def replies_behind_a_large_one():
    # A reply over --conn-buffer-limit stops the building of the ones behind it until it is
    # written. When the socket takes it all at once (6 KB here), nothing else comes to build them:
    # no round completes for a request answered at parse time (mn, version, quit) and, with the
    # output written, there is no EPOLLOUT either. They must be built anyway.
    value = b"w" * 6000
    reply = b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(value), value)
    with h.gphash_server("-t", "2", "--conn-buffer-limit", "4096") as s:
        h.exchange(s.port, b"set big 0 0 %d\r\n%s\r\n" % (len(value), value))
        version = h.exchange(s.port, b"version\r\n")
        for after, answer in ((b"mn\r\n", b"MN\r\n"), (b"version\r\n", version), (b"quit\r\n", b"<closed>")):
            ok = 0
            for i in range(10):
                with socket.create_connection(("127.0.0.1", s.port)) as c:
                    c.sendall(b"get big\r\n" + after)
                    got = read_to_eof(c, 5, until=reply + answer)
                if got != reply + answer:
                    break
                ok += 1
            check(ok == 10, f"{after.strip().decode()} after a reply over the buffer limit is answered ({ok} of 10; ends {got[-12:]!r})")


def quit_after_a_large_reply():
    # quit closes once the replies before it are written, all of them, as memcached does: here
    # 10 MB, more than the socket buffers hold while the client reads slowly (its receive buffer
    # is 4 KB). With the default buffer limit the reply is also written over several passes.
    value = b"q" * 1_000_000
    reply = b"VALUE big 0 %d\r\n%s\r\n" % (len(value), value) * 10 + b"END\r\n"
    for limit in (str(64 << 20), "4194304"):
        with h.gphash_server("-t", "2", "--conn-buffer-limit", limit) as s:
            h.exchange(s.port, b"set big 0 0 %d\r\n%s\r\n" % (len(value), value))
            with socket.socket() as c:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                c.connect(("127.0.0.1", s.port))
                c.sendall(b"get" + b" big" * 10 + b"\r\nquit\r\n")
                time.sleep(0.3)  # the server's first writes fill the socket meanwhile
                got = read_to_eof(c, 60, slow=True)
            check(got == reply + b"<closed>", f"--conn-buffer-limit {limit}: quit after a 10 MB reply sends all of it, then closes "
                                              f"({len(got)} bytes, ends {got[-12:]!r})")


def cpu_seconds(pid):
    """The process's user and system CPU time so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_that_shuts_down_sending():
    # A client may shut down its sending side once its requests are out (nc -N, scripts) and then
    # read the replies: memcached answers them all, then closes. With a batch period the requests
    # are still at a round when the end of input is read.
    want = b"".join(b"STORED\r\nVALUE k%d 0 1\r\n%d\r\nEND\r\n" % (i, i % 10) for i in range(3))
    with h.gphash_server("-t", "2", "--batch-period-us", "200") as s:
        ok = 0
        for n in range(10):
            with socket.create_connection(("127.0.0.1", s.port)) as c:
                c.sendall(b"".join(b"set k%d 0 0 1\r\n%d\r\nget k%d\r\n" % (i, i % 10, i) for i in range(3)))
                c.shutdown(socket.SHUT_WR)
                got = read_to_eof(c, 5)
            if got != want + b"<closed>":
                break
            ok += 1
        check(ok == 10, f"a client that shut down its sending side gets its replies, then the close ({ok} of 10; {got[-20:]!r})")
    # 10 MB of replies read slowly after the end of input: all of them arrive, and the server does
    # not spin meanwhile (the shut-down input is reported on every epoll_wait while it listens).
    value = b"h" * 1_000_000
    reply = b"VALUE big 0 %d\r\n%s\r\n" % (len(value), value) * 10 + b"END\r\n"
    for tail in (b"", b"quit\r\n"):
        with h.gphash_server("-t", "2") as s:
            h.exchange(s.port, b"set big 0 0 %d\r\n%s\r\n" % (len(value), value))
            with socket.socket() as c:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                c.connect(("127.0.0.1", s.port))
                c.sendall(b"get" + b" big" * 10 + b"\r\n" + tail)
                c.shutdown(socket.SHUT_WR)
                time.sleep(0.3)
                before = cpu_seconds(s.proc.pid)
                time.sleep(1.0)
                busy = cpu_seconds(s.proc.pid) - before
                got = read_to_eof(c, 60, slow=True)
            what = "get then quit" if tail else "get"
            check(got == reply + b"<closed>", f"{what}, then end of input: all 10 MB arrive, then the close ({len(got)} bytes, ends {got[-12:]!r})")
            check(busy < 0.3, f"{what}, then end of input: the server waits for the client without spinning ({busy:.2f} s of CPU in 1 s)")


def main():
    thousand_connections()
    connections_spread_over_workers()
    sender_that_never_reads()
    replies_behind_a_large_one()
    quit_after_a_large_reply()
    client_that_shuts_down_sending()
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
