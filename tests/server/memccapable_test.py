#!/usr/bin/python3
"""memccapable -a (libmemcached-tools) against Debian's memcached and against gphash-server: every
test that passes against memcached must pass against gphash-server."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

MEMCCAPABLE = os.environ.get("MEMCCAPABLE", "memccapable")


def run(port):
    r = subprocess.run([MEMCCAPABLE, "-a", "-h", "127.0.0.1", "-p", str(port)], capture_output=True, text=True, timeout=300)
    results = dict(re.findall(r"^(ascii [\w ]+?)\s+\[(\w+)\]", r.stdout, re.M))
    return results, r.stdout + r.stderr


def main():
    with h.memcached() as mc:
        theirs, _ = run(mc.port)
    if not theirs:
        print("memccapable reported no test against memcached")
        return 1
    failed = checked = 0
    # Rounds one at a time, then pipelined (each resolved while the next one's searches run).
    for pipeline in ("off", "on"):
        with h.gphash_server("--pipeline", pipeline) as gp:
            ours, text = run(gp.port)
        for name, result in theirs.items():
            if result != "pass":
                print(f"skip {name} (memcached: {result})")
                continue
            checked += 1
            if ours.get(name) != "pass":
                failed += 1
                print(f"FAIL {name} (--pipeline {pipeline}): gphash-server {ours.get(name)}")
            else:
                print(f"ok   {name} (--pipeline {pipeline})")
        if failed:
            print(text)
    print(f"{checked - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
