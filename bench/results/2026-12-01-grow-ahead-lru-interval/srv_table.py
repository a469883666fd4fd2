# srv_table.py OUT.jsonl: K requests a second (p99 us; server CPU us a request) of each run.
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for cfg in dict.fromkeys(r["config"] for r in rows):
    for which in ("memcached", "lru60", "lru0"):
        cells = []
        for r in rows:
            if r["config"] != cfg or r["server"] != which:
                continue
            l = r["load"]
            cpu = sum(r["after"].get(k, 0) - r["before"].get(k, 0) for k in ("rusage_user", "rusage_system"))
            cells.append(f'{l["requests_per_s"]/1e3:.0f} ({l["p99_us"]:.0f}; {cpu / l["requests"] * 1e6:.2f})')
        print(f"{cfg:24s} {which:10s} " + ", ".join(cells))
