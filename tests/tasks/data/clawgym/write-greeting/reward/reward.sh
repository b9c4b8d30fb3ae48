#!/usr/bin/env bash
# 1.0 when greeting.txt greets the name the task's name.txt holds (Ada: written here, since the
# workspace's copy is the agent's to edit); 0.5 when it exists with other text.
cd "$1" || { echo 0; exit 0; }
[ -f greeting.txt ] || { echo "no greeting.txt"; echo 0; exit 0; }
if [ "$(cat greeting.txt)" = "Hello, Ada!" ]; then echo 1.0; else echo 0.5; fi
