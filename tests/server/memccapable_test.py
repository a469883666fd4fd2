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
    with h.gphash_server() as gp:
        ours, text = run(gp.port)
    if not theirs:
        print("memccapable reported no test against memcached")
        return 1
    failed = 0
    for name, result in theirs.items():
        if result != "pass":
            print(f"skip {name} (memcached: {result})")
            continue
        if ours.get(name) != "pass":
            failed += 1
            print(f"FAIL {name}: gphash-server {ours.get(name)}")
        else:
            print(f"ok   {name}")
    if failed:
        print(text)
    print(f"{len(theirs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
