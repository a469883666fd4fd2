#!/usr/bin/env python3
"""GPHash's evaluation (paper section 4), every system side by side in one run.

    evaluate.py run    --build-dir build --out DIR [--size quick|medium|paper] [--parts ...]
    evaluate.py report DIR        (plots and report.md from DIR/results.json; run does it too)

Each measurement is one process: `gpu_bench --sections gpu-batches` where a batch starts and ends
in GPU memory (the GPU systems, and the CPU-assisted ones whose batch crosses PCIe to a CPU index
and back), `gphash bench` where it is in host memory. Results go to DIR/results.json after every run, so a run cut short
keeps what it measured; DIR/logs/ holds each process's output. Without a GPU only the CPU systems
run. Plots need matplotlib; without it `report` writes the markdown alone and says so.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

# name: (what it is, which tool runs it, its flags, needs a GPU). "gpu-batches" is gpu_bench's section
# of that name: the batch starts and ends in GPU memory (GPHash's setting: a GPU application's keys),
# and the GPU engine runs it in place while a CPU-assisted system copies it over PCIe and back.
# "bench" is `gphash bench`: the batch is in host memory (a CPU caller's setting).
SYSTEMS = {
    "gpu-mapped": ("GPHash on the GPU, table in host-mapped persistent memory, no cache",
                   "gpu-batches", ["--engine", "gpu", "--placement", "mapped"], True),
    "gpu-bktcache": ("... with BktCache as in the paper (LFU, 20% of the buckets; values stay in host memory)",
                     "gpu-batches", ["--engine", "gpu", "--placement", "mapped", "--cache", "lfu", "--cache-values", "off"],
                     True),
    "gpu-bktcache-values": ("... with BktCache caching the hot buckets' values too (beyond the paper)",
                            "gpu-batches", ["--engine", "gpu", "--placement", "mapped", "--cache", "lfu"], True),
    "gpu-memory": ("GPHash on the GPU, table in GPU memory (volatile; the upper bound)",
                   "gpu-batches", ["--engine", "gpu", "--placement", "gpu-memory"], True),
    "gpu-naive": ("the naive port: one GPU thread per operation, host-mapped (Clevel-GPM-like)",
                  "gpu-batches", ["--engine", "gpu", "--placement", "mapped", "--kernels", "thread"], True),
    "cpu-assisted-gphash": ("CPU-assisted: the batch crosses PCIe to the GPHash CPU engine on all cores, results back",
                            "gpu-batches", ["--engine", "cpu", "--index", "gphash"], True),
    "cpu-assisted-hmeh": ("CPU-assisted: the batch crosses PCIe to HMEH on all cores, results back",
                          "gpu-batches", ["--engine", "cpu", "--index", "hmeh"], True),
    "gpu-mapped-host-batches": ("gpu-mapped called with batches in host memory (gphash bench: a CPU caller)",
                                "bench", ["--engine", "gpu", "--placement", "mapped"], True),
    "cpu-gphash": ("the GPHash CPU engine alone, batches in host memory, all cores (no PCIe)",
                   "bench", ["--engine", "cpu"], False),
    "cpu-hmeh": ("HMEH alone, batches in host memory, all cores (no PCIe)", "bench", ["--engine", "cpu", "--index", "hmeh"],
                 False),
    # Peers. The list-based index with logging is ours, on libGPM (SlabHash-GPM's design: chains of
    # 128-byte slabs searched by a warp, every write an undo-logged transaction); gpKVS is libGPM's
    # Mega-KV-style store (8-byte values only); HierarchicalKV runs only where a harness built
    # outside this repository is given (--hkv-bench): a peer built to compare against is never part
    # of the project, its figures are (bench/results). All take 8-byte keys; batches start in GPU memory.
    "slablist-gpm": ("SlabHash-GPM stand-in: slab lists in host-mapped persistent memory, undo-logged writes (libGPM)",
                     "gpm-index", ["--system", "slablist"], True),
    "gpkvs": ("gpKVS (libGPM's Mega-KV-style store, HCL undo log), 8-byte values", "gpm-index",
              ["--system", "gpkvs", "--value-width", "8"], True),
    "hkv-gpu": ("HierarchicalKV, keys and values in GPU memory (volatile)", "hkv", ["--mode", "gpu"], True),
    "hkv-hybrid": ("HierarchicalKV hybrid: keys in GPU memory, values in pinned host memory (volatile)", "hkv",
                   ["--mode", "hybrid"], True),
}
PEERS = ("slablist-gpm", "gpkvs", "hkv-gpu", "hkv-hybrid")

SIZES = {  # records loaded, operations per micro workload, per YCSB workload, batch sizes (log2)
    "quick": dict(records=200_000, micro_ops=200_000, ycsb_ops=200_000, batches=range(10, 17, 2)),
    "medium": dict(records=4_000_000, micro_ops=4_000_000, ycsb_ops=8_000_000, batches=range(10, 23, 2)),
    "paper": dict(records=16_000_000, micro_ops=16_000_000, ycsb_ops=64_000_000, batches=range(10, 23)),
}
MICRO = ["load", "search", "negative-search", "update", "delete"]
YCSB = ["load", "a", "b", "c", "d", "f"]
PARTS = ["micro", "ycsb", "traces", "batch", "breakdown", "timeline", "factor", "cache", "skew", "keys", "shape",
         "resize-recovery"]
TRACES = ["load", "dlrm", "pagerank"]
VALUE_WIDTH = 128  # the paper's values
BATCH = 1 << 16


def has_gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def environment() -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "cpu": "unknown", "cores": os.cpu_count()}
    try:
        env["cpu"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    env["commit"] = os.environ.get("GPHASH_COMMIT")  # where the tree is a copy without its history
    if not env["commit"]:
        try:
            env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                           cwd=Path(__file__).parent).stdout.strip()
        except OSError:
            pass
    if has_gpu():
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True).stdout.strip().splitlines()[0]
        env["gpu"], env["driver"], env["gpu_memory"] = [x.strip() for x in q.split(",")]
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
        if "CUDA Version:" in head:
            env["cuda_driver_api"] = head.split("CUDA Version:")[1].split()[0]
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        env["nvcc"] = out.strip().splitlines()[-1] if out else None
    return env


def with_overrides(flags: list[str], extra: list[str]) -> list[str]:
    """`--name value` pairs of flags, with those of extra replacing the same names."""
    pairs = dict(zip(flags[::2], flags[1::2]))
    pairs.update(zip(extra[::2], extra[1::2]))
    return [x for kv in pairs.items() for x in kv]


class Runner:
    def __init__(self, build: Path, out: Path, size: str, gpu: bool, pool_dir: str, hkv_bench: Path):
        self.gphash = build / "gphash"
        self.gpu_bench = build / "bench" / "gpu_bench"
        self.tools = {"gpm-index": build / "bench" / "gpm_index_bench", "hkv": hkv_bench}
        self.out, self.size, self.gpu, self.pool = out, SIZES[size], gpu, f"{pool_dir}/gphash-evaluate"
        (out / "logs").mkdir(parents=True, exist_ok=True)
        path = out / "results.json"
        self.doc = json.loads(path.read_text()) if path.exists() else {"runs": []}
        self.doc.update(size=size, sizes={k: list(v) if isinstance(v, range) else v for k, v in self.size.items()},
                        value_width=VALUE_WIDTH, environment=environment(), systems={k: v[0] for k, v in SYSTEMS.items()})

    def save(self):
        (self.out / "results.json").write_text(json.dumps(self.doc, indent=1))

    def usable(self, system: str, key_width: int) -> bool:
        _, tool, _, needs_gpu = SYSTEMS[system]
        if needs_gpu and not self.gpu:
            return False
        if tool in self.tools and not self.tools[tool].exists():
            if tool not in self.doc.setdefault("missing_tools", {}):
                self.doc["missing_tools"][tool] = str(self.tools[tool])
                print(f"  (not run: {tool} systems, {self.tools[tool]} not built)", flush=True)
            return False
        if system in PEERS and key_width != 8:
            return False  # the peers take 8-byte keys
        return not (system.endswith("hmeh") and key_width not in (8, 16))  # HMEH: 8- or 16-byte keys

    def run(self, part: str, system: str, workloads: list[str], key_width: int = 8, records: int | None = None,
            operations: int | None = None, batch: int = BATCH, extra: list[str] | None = None,
            capacity: int | None = None, value_width: int = VALUE_WIDTH, **params):
        records = records or self.size["records"]
        operations = operations or self.size["micro_ops"]
        # Tables are sized for what the run inserts (LOAD, and D's 5%): resizes are the resize part's
        # (and the timeline's, which passes a small capacity on purpose).
        capacity = capacity or records + (operations // 16 if "d" in workloads else 0)
        tag = "_".join([part, system, str(key_width), str(batch)] + [f"{k}{v}" for k, v in params.items()])
        tag += "_" + "-".join(x.lstrip("-") for x in (extra or []))
        tag = "".join(c if c.isalnum() or c in "._-" else "-" for c in tag)
        log, js = self.out / "logs" / f"{tag}.txt", self.out / "logs" / f"{tag}.json"
        _, tool, flags, _ = SYSTEMS[system]
        common = ["--workloads", ",".join(workloads), "--operations", str(operations), "--capacity", str(capacity),
                  "--json", str(js)]
        if tool == "gpu-batches":
            cmd = [str(self.gpu_bench), "--sections", "gpu-batches", "--ycsb-records", str(records), "--ycsb-batch",
                   str(batch), "--ycsb-key-width", str(key_width), "--ycsb-value-width", str(value_width)] + common
            cmd += with_overrides(flags, extra or [])
        elif tool in self.tools:  # the peers: a system's own value width (gpKVS's 8 bytes) replaces ours
            options = with_overrides(["--value-width", str(value_width)] + flags, extra or [])
            value_width = int(options[options.index("--value-width") + 1])
            cmd = [str(self.tools[tool]), "--records", str(records), "--batch", str(batch), "--key-width",
                   str(key_width)] + common + options
        else:
            cmd = [str(self.gphash), "bench", "--pool", self.pool, "--no-progress", "--key-width", str(key_width),
                   "--value-width", str(value_width), "--records", str(records), "--batch", str(batch)] + common
            cmd += with_overrides(flags, extra or [])
        t0 = time.time()
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n")
            f.flush()
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        for leftover in Path(self.pool).parent.glob(Path(self.pool).name + "*"):
            leftover.unlink()
        entry = {"part": part, "system": system, "key_width": key_width, "value_width": value_width, "records": records,
                 "operations": operations,
                 "batch": batch, "extra": extra or [], "params": params, "rc": rc, "seconds": round(time.time() - t0, 1),
                 "log": str(log.relative_to(self.out))}
        try:
            doc = json.loads(js.read_text())
            entry["results"] = doc["gpu_batches"]["results"] if tool == "gpu-batches" else doc["results"]
            entry["results"] = [x for x in entry["results"] if not x.get("unsupported")]
            if part != "timeline":  # per-batch samples are plotted for the timeline part only
                for x in entry["results"]:
                    x.pop("timeline", None)
            js.unlink()
        except (OSError, KeyError, ValueError) as e:
            entry["error"] = f"no results ({e}); see {entry['log']}"
        if rc != 0:  # 1: gphash bench saw a lost or wrong result; it is recorded, not hidden
            entry["error"] = entry.get("error", "") + f" exit status {rc}"
        print(f"  {part:<15} {system:<20} k{key_width:<2} batch {batch:<8} {params or ''} {extra or ''}"
              f" -> {'ok' if rc == 0 else entry['error']} ({entry['seconds']} s)", flush=True)
        self.doc["runs"].append(entry)
        self.save()
        return entry


def run_parts(r: Runner, parts: list[str], systems: list[str]):
    size = r.size
    if "micro" in parts:  # GPHash figures 8-9: each operation alone, 8- and 32-byte keys
        for kw in (8, 32):
            for s in systems:
                if r.usable(s, kw):
                    r.run("micro", s, MICRO, key_width=kw)
    if "ycsb" in parts:  # figure 10: YCSB with its default distributions (Zipfian 0.99, D latest)
        for s in systems:
            if r.usable(s, 8):
                r.run("ycsb", s, YCSB, operations=size["ycsb_ops"])
    if "traces" in parts:  # figure 10's real-world workloads, synthesised: a DLRM-like and a PageRank-like trace
        for s in systems:
            if r.usable(s, 8):
                r.run("traces", s, TRACES, operations=size["ycsb_ops"])
    if "batch" in parts:  # throughput and batch latency against batch size, end to end and device time
        for s in ("gpu-mapped", "gpu-memory", "cpu-assisted-gphash", "gpu-mapped-host-batches", "cpu-gphash"):
            if s in systems and r.usable(s, 8):
                for lg in size["batches"]:
                    b = 1 << lg
                    r.run("batch", s, ["load", "c", "a"], batch=b, records=max(size["records"], b),
                          operations=max(size["micro_ops"] // 4, 4 * b))
    if not r.gpu:
        return
    if "breakdown" in parts:  # where a batch's time goes: transfer, index, value access (YCSB C and A)
        # Measured by difference, each pair in the same run: transfer = batches in host memory less
        # batches in GPU memory; value access = 128-byte values (read from the value heap) less
        # 8-byte values (inline in the slot); the index is the rest of the device time.
        for name, system, vw in (("host arrays", "gpu-mapped-host-batches", VALUE_WIDTH),
                                 ("gpu arrays", "gpu-mapped", VALUE_WIDTH), ("gpu arrays, inline values", "gpu-mapped", 8),
                                 ("host arrays", "cpu-assisted-gphash", VALUE_WIDTH)):
            r.run("breakdown", system, ["load", "c", "a"], operations=size["ycsb_ops"], value_width=vw, step=name)
    if "timeline" in parts:  # load factor during LOAD (from a small table, with its resizes); throughput
        # over time while the cache loads, from a cold cache
        r.run("timeline", "gpu-mapped", ["load"], capacity=max(1024, size["records"] // 64), what="load")
        r.run("timeline", "gpu-mapped", ["load"], what="load-sized")
        for s in ("gpu-bktcache", "gpu-bktcache-values"):
            r.run("timeline", s, ["load", "c"], operations=size["ycsb_ops"], what="cache")
    if "factor" in parts:  # naive port, + warp cooperation, + tag mirror, + cache
        for name, extra, system in (("naive", ["--kernels", "thread"], "gpu-mapped"),
                                    ("+warp", ["--kernels", "warp-direct"], "gpu-mapped"),
                                    ("+tag mirror", [], "gpu-mapped"),
                                    ("+BktCache", [], "gpu-bktcache"),
                                    ("+cached values", [], "gpu-bktcache-values")):
            r.run("factor", system, ["load", "c", "a"], operations=size["ycsb_ops"], extra=extra, step=name)
    if "cache" in parts:  # cache policy and size, Zipfian 0.99
        for policy in ("lfu", "lru", "random"):
            for fraction in (0.05, 0.1, 0.2, 0.4):
                r.run("cache", "gpu-bktcache-values", ["load", "c", "b"], operations=size["ycsb_ops"],
                      extra=["--cache", policy, "--cache-fraction", str(fraction)], policy=policy, fraction=fraction)
    if "skew" in parts:  # exact Zipf, so that theta >= 1 is possible
        for theta in (0.5, 0.7, 0.9, 0.99, 1.1, 1.2):
            for s in ("gpu-mapped", "gpu-bktcache", "gpu-bktcache-values", "gpu-memory"):
                r.run("skew", s, ["load", "c"], operations=size["ycsb_ops"],
                      extra=["--distribution", "zipfian-exact", "--theta", str(theta)], theta=theta)
    if "keys" in parts:
        for kw in (8, 16, 32):
            for s in ("gpu-mapped", "gpu-memory"):
                r.run("keys", s, ["load", "c", "a"], key_width=kw, operations=size["ycsb_ops"])
    if "shape" in parts:
        for shape in ("2L-2H-8S", "4L-2H-4S", "1L-4H-8S"):
            r.run("shape", "gpu-mapped", ["load", "c", "a"], operations=size["ycsb_ops"], extra=["--shape", shape],
                  shape=shape)
    if "resize-recovery" in parts:
        log, js = r.out / "logs" / "resize_recovery.txt", r.out / "logs" / "resize_recovery.json"
        n = size["records"]
        cmd = [str(r.gpu_bench), "--sections", "resize,recovery", "--resize-items", str(4 * n), "--batch", str(1 << 20),
               "--recovery-sizes", str(n // 16), str(n // 4), str(n), "--json", str(js)]
        t0 = time.time()
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        entry = {"part": "resize-recovery", "rc": rc, "seconds": round(time.time() - t0, 1), "log": str(log.relative_to(r.out))}
        try:
            entry["results"] = json.loads(js.read_text())
        except (OSError, ValueError) as e:
            entry["error"] = f"no results ({e})"
        print(f"  resize-recovery -> rc {rc} ({entry['seconds']} s)", flush=True)
        r.doc["runs"].append(entry)
        r.save()


# ---- report ----------------------------------------------------------------------------------

def mops(x):
    return x / 1e6 if x else 0.0


def rows_of(doc, part):
    return [e for e in doc["runs"] if e["part"] == part and "results" in e]


def result(entry, workload):
    return next((x for x in entry["results"] if x["workload"] == workload), None)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def report(out: Path):
    doc = json.loads((out / "results.json").read_text())
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    env = doc.get("environment", {})
    md = [f"# GPHash evaluation ({doc.get('size')} size)", ""]
    md += [f"- GPU: {env.get('gpu', 'none')} (driver {env.get('driver', '-')}, CUDA {env.get('cuda_driver_api', '-')}; "
           f"{env.get('nvcc', 'no nvcc')})",
           f"- CPU: {env.get('cpu')} ({env.get('cores')} hardware threads); date {env.get('date')}; commit "
           f"{env.get('commit', '?')}",
           f"- {doc['sizes']['records']:,} records loaded into a table sized for them (resizes are measured on "
           f"their own); {VALUE_WIDTH}-byte values; batches of {BATCH:,} unless stated. "
           "Rates are operations over the time of the batch calls, end to end: for the GPU and CPU-assisted "
           "systems a batch starts and ends in GPU memory (GPHash's setting), for the others in host memory. "
           "'device' rates count the GPU engine's device time (kernels and device-side copies) alone.",
           "- Every figure below was measured on this machine in this run (its parts may run one after another); "
           "ratios compare systems measured minutes apart.", ""]
    if doc.get("parts"):
        md[-1:-1] = [f"- Run in {len(doc['parts'])} parts, merged: " + "; ".join(
            f"{p.get('date')} on {p.get('gpu', 'no GPU')} ({p.get('host')})" for p in doc["parts"]) + "."]
    md += ["## Systems", ""] + [f"- `{k}`: {v}" for k, v in doc["systems"].items()] + [""]
    failures = [e for e in doc["runs"] if "error" in e]
    if failures:
        md += ["## Runs that failed or saw a wrong result", ""]
        md += [f"- {e['part']} {e.get('system', '')} k{e.get('key_width', '')}: {e['error']}" for e in failures] + [""]

    def save(fig, fname, title):
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        md.extend([f"![{title}]({fname})", ""])

    def bars(part, workloads, key_width, title, fname):
        entries = [e for e in rows_of(doc, part) if e["key_width"] == key_width]
        if not entries:
            return
        names = [e["system"] for e in entries]
        header = ["workload"] + names
        ref = next((e for e in entries if e["system"] == "cpu-assisted-gphash"), None)
        rows = []
        for w in workloads:
            row = [w]
            for e in entries:
                x = result(e, w)
                row.append(f"{mops(x['ops_per_second']):.1f}" if x else "-")
            rows.append(row)
        md.extend([f"## {title}", "", "M operations/s, end to end:", "", table(header, rows), ""])
        if ref:
            rrows = []
            for w in workloads:
                base = result(ref, w)
                row = [w]
                for e in entries:
                    x = result(e, w)
                    row.append(f"{x['ops_per_second'] / base['ops_per_second']:.2f}x" if x and base and base["ops_per_second"] else "-")
                rrows.append(row)
            md.extend(["Against the CPU-assisted GPHash CPU engine:", "", table(header, rrows), ""])
        if plt:
            fig, ax = plt.subplots(figsize=(11, 4.5))
            width = 0.8 / len(entries)
            colors = plt.get_cmap("tab20").colors  # one colour per system, up to 20 of them
            for i, e in enumerate(entries):
                ys = [mops((result(e, w) or {}).get("ops_per_second", 0)) for w in workloads]
                ax.bar([j + i * width for j in range(len(workloads))], ys, width, label=e["system"],
                       color=colors[i % len(colors)])
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))], workloads)
            ax.set_yscale("log")  # the systems span three orders of magnitude
            ax.set_ylabel("M operations/s (end to end, log scale)")
            ax.set_title(f"{title} — {env.get('gpu', 'CPU only')}")
            ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.08))
            ax.grid(axis="y", alpha=0.3, which="both")
            save(fig, fname, title)

    bars("micro", MICRO, 8, "Micro-benchmarks, 8-byte keys", "micro_k8.png")
    bars("micro", MICRO, 32, "Micro-benchmarks, 32-byte keys", "micro_k32.png")
    bars("ycsb", YCSB, 8, "YCSB (Zipfian 0.99; D: latest), 8-byte keys", "ycsb.png")
    bars("traces", TRACES, 8, "DLRM-like and PageRank-like traces, 8-byte keys", "traces.png")

    pcie = [e for e in doc["runs"] if e["part"] in ("micro", "ycsb", "traces") and "results" in e and
            any("pcie_in_bytes_per_op" in x for x in e["results"])]
    if pcie:
        md += ["## Bytes over PCIe per operation", "",
               "NVML's PCIe counters of the GPU, sampled in 20 ms windows while each workload ran, less the "
               "benchmark's own copies that place a batch in GPU memory and fetch its results (not timed, not the "
               "system's). in: host to GPU (reads of host memory, copies in); out: GPU to host (writes to the pool, "
               "copies out). Short runs make this coarse.", ""]
        rows = []
        for e in pcie:
            for x in e["results"]:
                if "pcie_in_bytes_per_op" in x:
                    rows.append([e["part"], e["system"], f"k{e['key_width']}/v{e.get('value_width', VALUE_WIDTH)}",
                                 x["workload"], f"{x['pcie_in_bytes_per_op']:.0f}", f"{x['pcie_out_bytes_per_op']:.0f}"])
        md += [table(["part", "system", "widths", "workload", "in B/op", "out B/op"], rows), ""]

    batch = rows_of(doc, "batch")
    if batch:
        md += ["## Batch size: throughput and batch latency (YCSB C and A)", ""]
        header = ["system", "batch", "C M/s", "C device M/s", "C p50 ms", "C p99 ms", "A M/s", "A p99 ms"]
        rows = []
        for e in batch:
            c, a = result(e, "c"), result(e, "a")
            rows.append([e["system"], e["batch"], f"{mops(c['ops_per_second']):.2f}",
                         f"{mops(c.get('device_ops_per_second') or 0):.2f}" if c.get("device_ops_per_second") else "-",
                         f"{1e3 * c['batch_p50_seconds']:.3f}", f"{1e3 * c['batch_p99_seconds']:.3f}",
                         f"{mops(a['ops_per_second']):.2f}", f"{1e3 * a['batch_p99_seconds']:.3f}"])
        md += [table(header, rows), ""]
        if plt:
            fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
            for s in dict.fromkeys(e["system"] for e in batch):
                es = [e for e in batch if e["system"] == s]
                xs = [e["batch"] for e in es]
                ax1.plot(xs, [mops(result(e, "c")["ops_per_second"]) for e in es], "o-", label=f"{s} C")
                dev = [mops(result(e, "c").get("device_ops_per_second") or 0) for e in es]
                if any(dev):
                    ax1.plot(xs, dev, "x--", label=f"{s} C, device time")
                ax2.plot(xs, [1e3 * result(e, "c")["batch_p50_seconds"] for e in es], "o-", label=f"{s} p50")
                ax2.plot(xs, [1e3 * result(e, "c")["batch_p99_seconds"] for e in es], "x--", label=f"{s} p99")
            for ax in (ax1, ax2):
                ax.set_xscale("log", base=2)
                ax.set_xlabel("operations per batch")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
            ax1.set_yscale("log")
            ax1.set_ylabel("M operations/s (YCSB C)")
            ax2.set_yscale("log")
            ax2.set_ylabel("batch latency, ms (YCSB C)")
            fig.suptitle(f"Throughput and latency against batch size — {env.get('gpu', 'CPU only')}")
            save(fig, "batch.png", "batch")

    staged = [e for e in batch if (result(e, "a") or {}).get("device_ops_per_second")]
    if staged:  # the GPU engine's device time by stage, as a share of the batch calls' time
        md += ["### Where the GPU engine's time goes (share of the batch calls' time)", "",
               "Plan: hashing and sorting the batch; kernel: the parallel pass; slow path: displacement, resize, "
               "heap growth and reclaiming freed value cells, run exclusively; the rest is the host's part of the "
               "call (copies of host arrays, launches, waits).", ""]
        rows = []
        for e in staged:
            for w in ("c", "a"):
                x = result(e, w)
                t = x["seconds"]
                shares = [x["plan_seconds"] / t, x["kernel_seconds"] / t, x["slow_seconds"] / t]
                rows.append([e["system"], e["batch"], w.upper()] + [f"{100 * f:.0f}%" for f in shares] +
                            [f"{100 * max(0.0, 1 - sum(shares)):.0f}%", x.get("heap_grows", "-")])
        md += [table(["system", "batch", "workload", "plan", "kernel", "slow path", "rest", "heap grows"], rows), ""]

    breakdown = {(e["system"], e["params"]["step"]): e for e in rows_of(doc, "breakdown")}
    if breakdown:
        md += ["## Where an operation's time goes (host-mapped, 8-byte keys, batches of 65,536)", "",
               "By difference between runs of this evaluation: transfer = the batch in host memory less the batch in "
               "GPU memory; value access = 128-byte values (in the value heap) less 8-byte values (inline in the "
               "slot), both in GPU memory; index = the 8-byte-value run (hashing, probing, the slot write and its "
               "persist, launches). CPU-assisted: transfer = the whole call less the CPU index alone.", ""]
        ns = lambda x: 1e9 / x if x else float("nan")
        rows = []
        for w in ("c", "a"):
            host, dev, inline = (result(breakdown[("gpu-mapped-host-batches" if k == "host arrays" else "gpu-mapped", k)], w)
                                 if ("gpu-mapped-host-batches" if k == "host arrays" else "gpu-mapped", k) in breakdown
                                 else None for k in ("host arrays", "gpu arrays", "gpu arrays, inline values"))
            if host and dev and inline:
                total, t_dev, t_inline = ns(host["ops_per_second"]), ns(dev["ops_per_second"]), ns(inline["ops_per_second"])
                rows.append(["gpu-mapped", w.upper(), f"{total:.1f}", f"{total - t_dev:.1f}", f"{t_inline:.1f}",
                             f"{t_dev - t_inline:.1f}"])
            ca = breakdown.get(("cpu-assisted-gphash", "host arrays"))
            x = result(ca, w) if ca else None
            if x and x.get("index_ops_per_second"):
                total, index = ns(x["ops_per_second"]), ns(x["index_ops_per_second"])
                rows.append(["cpu-assisted-gphash", w.upper(), f"{total:.1f}", f"{total - index:.1f}", f"{index:.1f}",
                             "(in index)"])
        md += [table(["system", "workload", "total ns/op", "transfer", "index", "value access"], rows), ""]

    timeline = rows_of(doc, "timeline")
    if timeline:
        md += ["## Over time: load factor during LOAD, throughput while the cache loads", ""]
        for e in timeline:
            for x in e["results"]:
                md.append(f"- {e['system']} ({e['params']['what']}) {x['workload']}: {mops(x['ops_per_second']):.1f} M/s, "
                          f"load factor after {x.get('load_factor_after', 0):.2f}, resizes {x.get('resizes', 0)}"
                          + (f", hit rate {100 * x['cache_hit_rate']:.0f}%" if x.get("cache_hit_rate") is not None else ""))
        md.append("")
    if timeline and plt:  # timeline points: [operations, seconds of batch calls, load factor, hit rate]
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.5))
        for e in timeline:
            what = e["params"]["what"]
            for x in e["results"]:
                pts = x.get("timeline") or []
                if what.startswith("load") and x["workload"] == "load":
                    ax1.plot([p[0] / 1e6 for p in pts], [p[2] for p in pts],
                             label=f"{e['system']}, {'from a small table' if what == 'load' else 'table sized for it'}")
                if what == "cache" and x["workload"] == "c" and len(pts) > 1:
                    seg = [(b[1], (b[0] - a[0]) / (b[1] - a[1]) / 1e6, b[3]) for a, b in zip(pts, pts[1:]) if b[1] > a[1]]
                    ax2.plot([t for t, _, _ in seg], [r for _, r, _ in seg], label=e["system"])
                    ax3.plot([t for t, _, _ in seg], [100 * (h or 0) for _, _, h in seg], label=e["system"])
        for ax, xl, yl, title in ((ax1, "M records inserted", "load factor", "Load factor during LOAD"),
                                  (ax2, "seconds of batch calls into YCSB C", "M operations/s", "YCSB C right after LOAD"),
                                  (ax3, "seconds of batch calls into YCSB C", "cache hit rate, %", "Hit rate while it loads")):
            ax.set_xlabel(xl)
            ax.set_ylabel(yl)
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "timeline.png", "timeline")

    factor = rows_of(doc, "factor")
    if factor:
        base = {w: (result(factor[0], w) or {}).get("ops_per_second") for w in ("load", "c", "a")}
        header = ["step", "LOAD M/s", "C M/s", "A M/s", "C vs naive", "A vs naive", "C hit rate"]
        rows = []
        for e in factor:
            l, c, a = (result(e, w) for w in ("load", "c", "a"))
            hit = c.get("cache_hit_rate")
            rows.append([e["params"]["step"], f"{mops(l['ops_per_second']):.1f}", f"{mops(c['ops_per_second']):.1f}",
                         f"{mops(a['ops_per_second']):.1f}", f"{c['ops_per_second'] / base['c']:.2f}x" if base["c"] else "-",
                         f"{a['ops_per_second'] / base['a']:.2f}x" if base["a"] else "-",
                         f"{100 * hit:.0f}%" if hit is not None else "-"])
        md += ["## Factor analysis (host-mapped, YCSB Zipfian 0.99)", "",
               "In-place keys are not a step here: gphash always keeps keys in the slots.", "", table(header, rows), ""]

    cache = rows_of(doc, "cache")
    if cache:
        md += ["## Cache policy and size (YCSB C and B, Zipfian 0.99)", ""]
        header = ["policy", "fraction", "C M/s", "C hit rate", "B M/s", "B hit rate", "cache GPU MiB"]
        rows = [[e["params"]["policy"], e["params"]["fraction"], f"{mops(result(e, 'c')['ops_per_second']):.1f}",
                 f"{100 * (result(e, 'c').get('cache_hit_rate') or 0):.0f}%", f"{mops(result(e, 'b')['ops_per_second']):.1f}",
                 f"{100 * (result(e, 'b').get('cache_hit_rate') or 0):.0f}%",
                 f"{result(e, 'c').get('cache_gpu_bytes', 0) / 2**20:.0f}"] for e in cache]
        md += [table(header, rows), ""]
        if plt:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for policy in dict.fromkeys(e["params"]["policy"] for e in cache):
                es = [e for e in cache if e["params"]["policy"] == policy]
                ax.plot([e["params"]["fraction"] for e in es], [mops(result(e, "c")["ops_per_second"]) for e in es], "o-",
                        label=policy)
            nocache = next((e for e in rows_of(doc, "factor") if e["params"]["step"] == "+tag mirror"), None)
            if nocache:
                ax.axhline(mops(result(nocache, "c")["ops_per_second"]), color="gray", ls="--", label="no cache")
            ax.set_xlabel("share of buckets cached")
            ax.set_ylabel("M operations/s (YCSB C)")
            ax.set_title(f"BktCache policy and size — {env.get('gpu')}")
            ax.grid(alpha=0.3)
            ax.legend()
            save(fig, "cache.png", "cache")

    skew = rows_of(doc, "skew")
    if skew:
        thetas = sorted(dict.fromkeys(e["params"]["theta"] for e in skew))
        systems = list(dict.fromkeys(e["system"] for e in skew))
        rows = [[t] + [f"{mops(result(e, 'c')['ops_per_second']):.1f}" for s in systems for e in skew
                       if e["system"] == s and e["params"]["theta"] == t] for t in thetas]
        md += ["## Skew (YCSB C, exact Zipf)", "", "M operations/s:", "", table(["theta"] + systems, rows), ""]
        if plt:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for s in systems:
                es = [e for e in skew if e["system"] == s]
                ax.plot([e["params"]["theta"] for e in es], [mops(result(e, "c")["ops_per_second"]) for e in es], "o-", label=s)
            ax.set_xlabel("Zipf exponent")
            ax.set_ylabel("M operations/s (YCSB C)")
            ax.set_yscale("log")
            ax.set_title(f"Skew — {env.get('gpu')}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            save(fig, "skew.png", "skew")

    for part, title, key in (("keys", "Key size", "key_width"), ("shape", "Table shape", "shape")):
        entries = rows_of(doc, part)
        if entries:
            rows = [[e["system"], e["key_width"] if key == "key_width" else e["params"]["shape"]] +
                    [f"{mops(result(e, w)['ops_per_second']):.1f}" for w in ("load", "c", "a")] for e in entries]
            md += [f"## {title} (YCSB, Zipfian 0.99)", "", table(["system", key, "LOAD M/s", "C M/s", "A M/s"], rows), ""]

    rr = next((e for e in doc["runs"] if e["part"] == "resize-recovery" and "results" in e), None)
    if rr:
        res = rr["results"]
        md += ["## Resize and recovery", ""]
        for k in ("resize_gpu_memory", "resize_mapped"):
            if res.get(k):
                md += [f"{k.replace('_', ' ')}: " + ", ".join(f"{x['slots_after']:,} slots {1e3 * x['seconds']:.1f} ms"
                                                              for x in res[k]), ""]
        if res.get("recovery"):
            md += [table(["items", "GPU recovery ms", "CPU recovery ms"],
                         [[f"{x['items']:,}", f"{1e3 * x['gpu_recovery_seconds']:.1f}",
                           f"{1e3 * x['cpu_recovery_seconds']:.1f}"] for x in res["recovery"]]), ""]

    ran = {e["part"] for e in doc["runs"]}
    md += ["## Not measured here", "",
           "- Parts not in this run: " + (", ".join(p for p in PARTS if p not in ran) or "none") + ".",
           "- The peers (the SlabHash-GPM stand-in, gpKVS, HierarchicalKV) take 8-byte keys only, and gpKVS "
           "8-byte values only. PCIe bytes are counted for the systems `gpu_bench` runs, not for the peers.",
           "- The peers' harnesses apply a batch by operation type (HierarchicalKV: writes, erases, then reads) or "
           "combine it on the host before the clock starts (the SlabHash-GPM stand-in and gpKVS keep each key's "
           "last write and answer later reads of it from the batch). GPHash applies a batch in order and "
           "combines duplicate keys inside its timed GPU path: under skew the peers run fewer table operations "
           "than GPHash for the same stream.", ""]
    if not plt:
        md += ["(matplotlib is not installed here: no plots; `evaluate.py report DIR` on a machine with it adds them.)", ""]
    (out / "report.md").write_text("\n".join(md))
    print(f"wrote {out / 'report.md'}" + ("" if plt else " (no plots: matplotlib missing)"))


def merge(out: Path, sources: list[Path], commit: str | None):
    """One results.json from runs made in parts (device calls, machines) at one size."""
    docs = [json.loads((d / "results.json").read_text()) for d in sources]
    sizes = {d["size"] for d in docs}
    if len(sizes) != 1:
        sys.exit(f"evaluate merge: the parts have different sizes ({', '.join(sorted(sizes))}); merge one size at a time")
    doc = dict(docs[0], runs=[r for d in docs for r in d["runs"]], parts=[d["environment"] for d in docs])
    for r in doc["runs"]:
        if r["part"] not in ("timeline", "resize-recovery"):
            for x in r.get("results", []):
                x.pop("timeline", None)
    if commit:
        for env in [doc["environment"]] + doc["parts"]:
            env["commit"] = commit
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    report(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the chosen parts, then write the report")
    run.add_argument("--build-dir", type=Path, default=Path("build"))
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--size", choices=SIZES, default="medium")
    run.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {','.join(PARTS)}")
    run.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {','.join(SYSTEMS)}")
    run.add_argument("--pool-dir", default="/dev/shm", help="where pools go (a tmpfs: the persistent memory stand-in)")
    run.add_argument("--hkv-bench", type=Path, default=Path(__file__).resolve().parent.parent / ".peers/hkv/hkv_bench",
                     help="a HierarchicalKV harness built outside the project (its systems are skipped without it)")
    rep = sub.add_parser("report", help="plots and report.md from DIR/results.json")
    rep.add_argument("dir", type=Path)
    mrg = sub.add_parser("merge", help="one results.json and report from parts run apart (one size)")
    mrg.add_argument("out", type=Path)
    mrg.add_argument("dirs", type=Path, nargs="+")
    mrg.add_argument("--commit", help="the commit the parts ran (where their copy of the tree had no history)")
    args = ap.parse_args()
    if args.command == "report":
        return report(args.dir)
    if args.command == "merge":
        return merge(args.out, args.dirs, args.commit)
    parts, systems = args.parts.split(","), args.systems.split(",")
    for x in parts:
        if x not in PARTS:
            sys.exit(f"evaluate: unknown part '{x}'; choose from {','.join(PARTS)}")
    for x in systems:
        if x not in SYSTEMS:
            sys.exit(f"evaluate: unknown system '{x}'; choose from {','.join(SYSTEMS)}")
    gpu = has_gpu()
    if not (args.build_dir / "gphash").exists():
        sys.exit(f"evaluate: {args.build_dir}/gphash not found: build first (scripts/build.sh)")
    r = Runner(args.build_dir, args.out, args.size, gpu, args.pool_dir, args.hkv_bench)
    print(f"evaluate: {args.size} size, parts {','.join(parts)}; "
          f"{'GPU: ' + r.doc['environment'].get('gpu', '?') if gpu else 'no GPU: the CPU systems only'}", flush=True)
    t0 = time.time()
    run_parts(r, parts, systems)
    print(f"evaluate: {len(r.doc['runs'])} runs in {time.time() - t0:.0f} s", flush=True)
    report(args.out)
    return 1 if any("error" in e for e in r.doc["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
