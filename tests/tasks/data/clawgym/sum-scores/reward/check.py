"""Sub-scores for sum-scores: total.txt exists, holds an integer, holds the right one."""

import json
import sys
from pathlib import Path

work = Path(sys.argv[1])
total = work / "total.txt"
text = total.read_text().strip() if total.is_file() else ""
expected = sum(int(line) for line in (work / "scores.txt").read_text().split())
print("checking", total)
print(
    json.dumps(
        {
            "exists": float(total.is_file()),
            "integer": float(text.isdigit()),
            "correct": float(text == str(expected)),
        }
    )
)
