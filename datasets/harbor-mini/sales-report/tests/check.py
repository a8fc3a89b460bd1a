import json

try:
    with open("/app/report.json") as f:
        report = json.load(f)
except (OSError, ValueError):
    report = {}
total = 1.0 if report.get("total") == 305 else 0.0
regions = 1.0 if report.get("by_region") == {"north": 150, "south": 100, "east": 55} else 0.0
with open("/logs/verifier/reward.json", "w") as f:
    json.dump({"reward": total * regions, "total": total, "by_region": regions}, f)
