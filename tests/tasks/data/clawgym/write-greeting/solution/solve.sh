#!/usr/bin/env bash
echo "Hello, $(cat name.txt)!" > greeting.txt
