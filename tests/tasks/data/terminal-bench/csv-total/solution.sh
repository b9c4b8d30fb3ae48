#!/bin/bash
tail -n +2 /app/sales.csv | awk -F, '{ s += $2 } END { print s }' > /app/total.txt
