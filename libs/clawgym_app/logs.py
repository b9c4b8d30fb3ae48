"""Where a command's logs go: a file in its run folder, so the terminal shows only progress and results."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path


def log_to_file(path: Path, level: int = logging.INFO) -> None:
    """Sends every log record (ours and the libraries') to `path`; nothing to the terminal."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)


def quiet_libraries() -> None:
    """No weight-loading progress bars or advisory warnings from transformers on the terminal."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="transformers")
