"""Checks /app/total.txt (TEST_DIR is where these tests were copied)."""

import os
from pathlib import Path


def test_total_file_exists():
    assert Path("/app/total.txt").is_file()


def test_total_is_the_sum_of_amounts():
    assert Path("/app/total.txt").read_text().strip() == "40"


def test_tests_were_copied_to_test_dir():
    assert os.environ["TEST_DIR"] == "/tests" and Path("/tests/test_outputs.py").is_file()
