#!/usr/bin/env bash
set -e
mkdir -p output
{ echo "# Summary"; sed -n 's/^ACTION: /- /p' input/notes.txt; } > output/summary.md
