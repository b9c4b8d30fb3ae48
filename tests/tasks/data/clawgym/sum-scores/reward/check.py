"""Sub-scores for sum-scores: total.txt exists, holds an integer, holds the right one.

The right total is the one of the scores.txt the task ships (3 + 4 + 5), never recomputed from the
workspace's copy: the agent can edit that one.
"""

import json
import sys
from pathlib import Path

work = Path(sys.argv[1])
total = work / "total.txt"
text = total.read_text().strip() if total.is_file() else ""
expected = 12
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
