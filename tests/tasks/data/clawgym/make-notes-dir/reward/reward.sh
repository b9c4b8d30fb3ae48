#!/usr/bin/env bash
cd "$1" && [ -d notes ] && echo 1 || echo 0
