#!/usr/bin/python3
"""Byte-for-byte differential test: every case of corpus.txt goes to a fresh Debian memcached and
a fresh gphash-server; the replies must be the same bytes (the VERSION line aside), except where a
case says gphash deliberately differs, and then gphash's bytes must be the ones the case gives.

    GPHASH_SERVER=build/gphash-server MEMCACHED=/usr/bin/memcached tests/server/differential_test.py
"""
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcharness as h

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.txt")


def expand(text):
    text = re.sub(r"\{(.)\*(\d+)\}", lambda m: m.group(1) * int(m.group(2)), text)
    return text.encode("latin1").decode("unicode_escape").encode("latin1")


def load_cases(path):
    cases, case = [], None
    for line in open(path, encoding="latin1"):
        line = line.rstrip("\n")
        if line.startswith("#") or (not line and case is None):
            continue
        if line.startswith("=== "):
            case = {"name": line[4:], "data": b"", "sentinel": True, "args": [], "ours": None, "why": None}
            cases.append(case)
        elif line == "!nosentinel":
            case["sentinel"] = False
        elif line.startswith("!args "):
            case["args"] = line[6:].split()
        elif line.startswith("!ours "):
            case["ours"] = expand(line[6:])
        elif line.startswith("!why "):
            case["why"] = line[5:]
        elif line:
            case["data"] += expand(line)
    return cases


def normalise(reply):
    return re.sub(rb"VERSION [^\r]*\r\n", b"VERSION <v>\r\n", reply)


def run_case(case):
    # Every other case runs with a batch period, so rounds are also formed by the scheduler thread;
    # every other pair with rounds pipelined (each resolved while the next one's searches run);
    # every other four with receivers that hand every further round to the scheduler thread.
    timing = ["--batch-period-us", "200", "--batch-size", "64"] if case["index"] % 2 else []
    pipeline = ["--pipeline", "on" if case["index"] // 2 % 2 else "off"]
    rounds = ["--receiver-rounds", "0"] if case["index"] // 4 % 2 else []
    # One partition: CAS values then follow memcached's one sequence (partitions_test.py compares
    # the rest with several).
    with h.memcached(*case["args"]) as mc, h.gphash_server("-t", "2", "--partitions", "1", *timing, *pipeline, *rounds, *case["args"]) as gp:
        theirs = h.exchange(mc.port, case["data"], case["sentinel"])
        ours = h.exchange(gp.port, case["data"], case["sentinel"])
    return normalise(theirs), normalise(ours)


def main():
    cases = load_cases(CORPUS)
    for i, case in enumerate(cases):
        case["index"] = i
    only = sys.argv[1:]
    if only:
        cases = [c for c in cases if c["name"] in only]
    failed = 0
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run_case, cases))
    for case, (theirs, ours) in zip(cases, results):
        if case["ours"] is None:
            ok = theirs == ours
        else:
            ok = ours == case["ours"] and theirs != ours
        if not ok:
            failed += 1
            print(f"FAIL {case['name']}\n  memcached: {theirs[:600]!r}\n  gphash:    {ours[:600]!r}")
            if case["ours"] is not None:
                print(f"  expected gphash: {case['ours']!r} ({case['why']})")
        else:
            note = f" (differs on purpose: {case['why']})" if case["ours"] is not None else ""
            print(f"ok   {case['name']}{note}")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
