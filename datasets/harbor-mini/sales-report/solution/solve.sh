#!/bin/bash
python3 - <<'PY'
import csv, json
rows = list(csv.DictReader(open("/app/sales.csv")))
by = {}
for r in rows:
    by[r["region"]] = by.get(r["region"], 0) + int(r["amount"])
json.dump({"total": sum(by.values()), "by_region": by}, open("/app/report.json", "w"))
PY
