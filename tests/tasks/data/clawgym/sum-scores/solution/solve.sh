#!/usr/bin/env bash
awk '{ s += $1 } END { print s }' scores.txt > total.txt
