"""The answer is fixed here (the sum of 1..1000), never recomputed from the workspace."""

from pathlib import Path


def test_the_answer_is_the_sum_of_the_numbers():
    assert Path("/app/answer.txt").read_text().strip() == "500500"


def test_the_built_data_is_still_there():
    assert len(Path("/app/numbers.txt").read_text().split()) == 1000
