"""Code checks of hybrid-summary: the summary exists, starts with its title, and lists both action
items as bullets. Its quality is the rubric's (data_entry.json `rules`), scored by the judge."""

import json
import sys
from pathlib import Path

summary = Path(sys.argv[1]) / "output" / "summary.md"
lines = summary.read_text().splitlines() if summary.is_file() else []
bullets = {line[2:].strip() for line in lines if line.startswith("- ")}
print(
    json.dumps(
        {
            "exists": float(summary.is_file()),
            "title": float(bool(lines) and lines[0].strip() == "# Summary"),
            "items": float({"book the room for Friday", "send the agenda to all volunteers"} <= bullets),
        }
    )
)
