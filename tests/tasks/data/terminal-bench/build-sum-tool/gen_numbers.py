"""Writes the integers 1..N, one per line (the task's data, made at image build time)."""

import sys

for i in range(1, int(sys.argv[1]) + 1):
    print(i)
