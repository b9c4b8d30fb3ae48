"""`set_threads`: the torch threads a quickstart computes with (its engine and trainer share the cores)."""

import os

import pytest
import torch

from clawgym_app.logs import set_threads


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_explicit_threads_are_set_as_asked(restore_threads):
    assert set_threads(1, computing=2) == 1
    assert torch.get_num_threads() == 1


def test_auto_shares_the_cores_between_the_threads_computing_at_once(restore_threads, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # a quiet machine
    default = restore_threads
    assert set_threads(0, computing=2) == max(1, default // 2)
    torch.set_num_threads(default)
    assert set_threads(0) == default
    assert torch.get_num_threads() == default


def test_auto_takes_one_thread_on_a_busy_machine(restore_threads, monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (float(cores), 0.0, 0.0))
    assert set_threads(0) == 1
    assert torch.get_num_threads() == 1
