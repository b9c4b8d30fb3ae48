"""Process setup of a run command: logs into the run folder (the terminal shows progress), torch threads."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from clawgym.log_noise import demote_routine


def log_to_file(path: Path, level: int = logging.INFO) -> None:
    """Sends every log record (ours and the libraries') at `level` or above to `path`; nothing to the
    terminal. Per-request health checks and per-call acknowledgements are DEBUG records
    (`clawgym.log_noise`): at INFO the file holds steps, evaluations, checkpoints and warnings."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    demote_routine()
    logging.captureWarnings(True)


def quiet_libraries() -> None:
    """No weight-loading progress bars or advisory warnings from transformers on the terminal."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="transformers")


def machine_busy() -> bool:
    """Other processes keep the cores busy: the 1-minute load average is above half the cores."""
    return os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1)


def set_threads(threads: int = 0, computing: int = 1) -> int:
    """Sets torch's intra-op threads; 0 = auto: the cores shared out between the `computing` threads of
    this process that run torch at once (an async quickstart's engine and trainer: 2), or 1 when other
    processes keep the cores busy (1-minute load average above half the cores). Threads that wait on
    each other's barrier while another thread or process holds their core run several times slower
    (measured: a SmolLM2 prefill of 8x193 tokens took 6.5 s on 1 thread and 12 s on 2 under a load
    of 5 on 2 cores; 12-step quickstarts on 2 cores trained in 202 s on 1 thread each, 223 s on 2)."""
    import torch

    if threads <= 0:
        threads = 1 if machine_busy() else max(1, torch.get_num_threads() // computing)
    torch.set_num_threads(threads)
    return threads
