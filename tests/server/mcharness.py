"""Starting and stopping servers for the out-of-process tests (Debian's python3, stdlib only).

Every server a test starts listens on 127.0.0.1 on a free port, and is stopped by the test that
started it (the context managers below), even when the test fails.
"""
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time

GPHASH_SERVER = os.environ.get("GPHASH_SERVER", "gphash-server")
MEMCACHED = os.environ.get("MEMCACHED", "memcached")
# More options for every gphash-server the tests start, e.g. "--engine gpu" on the GPU machine.
GPHASH_SERVER_ARGS = os.environ.get("GPHASH_SERVER_ARGS", "").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"server did not listen on {port} within {timeout} s")


class Server:
    def __init__(self, argv, port):
        if argv[0] == GPHASH_SERVER:
            argv = [*argv, *GPHASH_SERVER_ARGS]
        self.argv, self.port = argv, port
        # stderr into a file, not a pipe no one reads while the server runs: a server that writes
        # more than a pipe holds (-vv, a sanitizer's reports) would block on it.
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.err)
        try:
            wait_port(port, self.proc)
        except Exception:
            self.kill()
            raise

    def stop(self, timeout=10.0):
        """SIGTERM, then wait; returns the exit code (SIGKILL after the timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"{self.argv[0]} did not stop within {timeout} s of SIGTERM")
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


@contextlib.contextmanager
def gphash_server(*args, port=None):
    port = port or free_port()
    s = Server([GPHASH_SERVER, "-p", str(port), "-l", "127.0.0.1", *args], port)
    try:
        yield s
    finally:
        try:
            s.stop()
        finally:
            s.kill()


@contextlib.contextmanager
def memcached(*args, port=None):
    port = port or free_port()
    argv = [MEMCACHED, "-p", str(port), "-l", "127.0.0.1", "-U", "0", *args]
    if os.geteuid() == 0:
        argv += ["-u", "root"]  # memcached refuses to run as root otherwise
    s = Server(argv, port)
    try:
        yield s
    finally:
        s.kill()


def stats(port, command=b"stats\r\n"):
    """The STAT lines of a `stats` reply (or of several stats commands) as a dict of strings."""
    out = {}
    for line in exchange(port, command).split(b"\r\n"):
        if line.startswith(b"STAT "):
            _, k, v = line.split(b" ", 2)
            out[k.decode()] = v.decode()
    return out


def exchange(port, data, sentinel=True, idle=0.3, timeout=10.0):
    """Sends `data` on a fresh connection and returns every byte the server sends back. With
    `sentinel`, an `mn` request follows and the read ends at its MN (or at EOF); without, it ends
    at EOF or after `idle` seconds of silence once the reply has begun. The first byte may take up
    to `timeout`: with `idle` for it too, a server descheduled for 0.3 s (a sanitizer build on a
    busy machine) read as one that never answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data + (b"mn\r\n" if sentinel else b""))
        # The reply ends with the sentinel's MN: as many MN lines as mn requests were sent.
        want_mn = data.count(b"mn\r\n") + 1
        out = b""
        deadline = time.time() + timeout
        s.settimeout(0.5)
        while time.time() < deadline:
            try:
                chunk = s.recv(1 << 20)
            except socket.timeout:
                if not sentinel and out:
                    break
                continue
            if not chunk:
                out += b"<closed>"
                break
            out += chunk
            if not sentinel:
                s.settimeout(idle)
            if sentinel and out.endswith(b"MN\r\n") and out.count(b"MN\r\n") >= want_mn:
                out = out[: -len(b"MN\r\n")]
                break
        return out
