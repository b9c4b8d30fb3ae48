"""`return_free_memory`: what a step freed inside the heap goes back to the OS (glibc)."""

import os

import psutil
import pytest
import torch

from clawgym.trainer.memory import return_free_memory


@pytest.mark.skipif(os.uname().sysname != "Linux", reason="glibc's malloc_trim")
def test_memory_a_step_freed_in_the_heap_goes_back_to_the_os():
    process = psutil.Process()
    # 800 tensors of 512 KiB (below glibc's mmap threshold: in the heap, as an update's activations
    # are); every other one freed leaves ~200 MB of holes that free() cannot give back by itself
    tensors = [torch.ones(128 * 1024) for _ in range(800)]
    del tensors[::2]
    after_free = process.memory_info().rss
    assert return_free_memory(), "glibc returned no page"
    after_trim = process.memory_info().rss
    assert after_free - after_trim > 100 * 2**20, (
        f"the freed ~200 MB must leave the process: rss {after_free / 2**20:.0f} MB after the frees, "
        f"{after_trim / 2**20:.0f} MB after the trim"
    )
    assert len(tensors) == 400 and float(tensors[-1].sum()) == 128 * 1024, "the kept half is intact"
