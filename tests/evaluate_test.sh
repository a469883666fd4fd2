#!/usr/bin/env bash
# The evaluation driver end to end on the CPU systems, quick size: every run must finish with its
# results, none may report a lost or wrong result, and the report must hold their tables.
set -euo pipefail
build=$1
out=$(mktemp -d)
pools=$(mktemp -d -p /dev/shm)
trap 'rm -rf "$out" "$pools"' EXIT
python3 "$(dirname "$0")/../bench/evaluate.py" run --build-dir "$build" --out "$out" --size quick \
  --parts micro,ycsb,traces --systems cpu-gphash,cpu-hmeh --pool-dir "$pools"
python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
doc = json.loads((out / "results.json").read_text())
runs = doc["runs"]
# micro: gphash at 8- and 32-byte keys, hmeh at 8 only; ycsb and traces: both
assert len(runs) == 7, [(r["part"], r["system"], r["key_width"]) for r in runs]
for r in runs:
    assert "error" not in r, r
    names = [x["workload"] for x in r["results"]]
    assert names == {"micro": ["load", "search", "negative-search", "update", "delete"],
                     "ycsb": ["load", "a", "b", "c", "d", "f"], "traces": ["load", "dlrm", "pagerank"]}[r["part"]], names
    for x in r["results"]:
        assert x["ops_per_second"] > 0 and x["not_found"] == 0 and x["found_absent"] == 0 and x["failed_writes"] == 0, x
    delete = next((x for x in r["results"] if x["workload"] == "delete"), None)
    if delete:
        assert delete["items_after"] == 0, delete  # every loaded record erased once
report = (out / "report.md").read_text()
assert "Micro-benchmarks, 8-byte keys" in report and "YCSB" in report and "PageRank-like" in report, report
try:
    import matplotlib  # noqa: F401 (CI installs it: the plots are tested there)
    for png in ("micro_k8.png", "micro_k32.png", "ycsb.png", "traces.png"):
        assert (out / png).stat().st_size > 10_000, png
except ImportError:
    print("evaluate_test: matplotlib missing here, plots not checked")
PY
# A run split into parts (as on a machine with a time limit per call) merges into one report.
python3 "$(dirname "$0")/../bench/evaluate.py" run --build-dir "$build" --out "$out/second" --size quick \
  --parts traces --systems cpu-gphash --pool-dir "$pools" >/dev/null
python3 "$(dirname "$0")/../bench/evaluate.py" merge "$out/merged" "$out" "$out/second" --commit abc1234 >/dev/null
python3 - "$out/merged" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
doc = json.loads((out / "results.json").read_text())
assert len(doc["runs"]) == 8 and len(doc["parts"]) == 2, (len(doc["runs"]), doc.get("parts"))
assert all(p["commit"] == "abc1234" for p in doc["parts"]) and doc["environment"]["commit"] == "abc1234"
assert "Run in 2 parts, merged" in (out / "report.md").read_text()
print("evaluate_test: ok")
PY
