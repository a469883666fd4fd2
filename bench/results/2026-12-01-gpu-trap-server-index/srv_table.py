# srv_table.py OUT.jsonl: K requests a second (p99 us; server CPU us a request) of each run, and
# each variant's mean over memcached's mean in the same configuration.
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for cfg in dict.fromkeys(r["config"] for r in rows):
    means = {}
    for which in dict.fromkeys(r["server"] for r in rows):
        cells, rates = [], []
        for r in rows:
            if r["config"] != cfg or r["server"] != which:
                continue
            l = r["load"]
            cpu = sum(r["after"].get(k, 0) - r["before"].get(k, 0) for k in ("rusage_user", "rusage_system"))
            cells.append(f'{l["requests_per_s"]/1e3:.0f} ({l["p99_us"]:.0f}; {cpu / l["requests"] * 1e6:.2f})')
            rates.append(l["requests_per_s"])
        means[which] = sum(rates) / len(rates)
        ratio = means[which] / means["memcached"] if "memcached" in means else float("nan")
        print(f"{cfg:24s} {which:12s} x{ratio:.2f}  " + ", ".join(cells))
