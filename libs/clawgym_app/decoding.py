"""Token text for the reading commands (`clawgym browse`, `clawgym export`): the tokenizer of `--model`,
else of the model a run's config names; none (token ids only) when there is none or it cannot load.
"""

import logging
from collections.abc import Callable, Sequence
from functools import cache

from clawgym.records import Run

log = logging.getLogger(__name__)

Decode = Callable[[Sequence[int]], str]


def run_model(run: Run, model: str = "") -> str:
    """`model` if given, else the model the run's config names (`model` or `trainer.model`), else ""."""
    spec = model or run.config.get("model") or (run.config.get("trainer") or {}).get("model") or ""
    return spec if isinstance(spec, str) else ""


def load_decoder(spec: str) -> Decode:
    """The decode function of model `spec`'s tokenizer; raises what loading it raised."""
    from clawgym.policies import load_tokenizer

    tok = load_tokenizer(spec)
    return lambda ids: tok.decode(list(ids))


def decoders(model: str) -> Callable[[Run], Decode | None]:
    """Per run: the decode function of `run_model(run, model)`'s tokenizer (loaded once per spec), else
    None; a tokenizer that cannot load is logged once."""

    @cache
    def load(spec: str) -> Decode | None:
        try:
            return load_decoder(spec)
        except Exception as e:  # an unknown or unreachable model: token ids only
            log.warning("cannot load the tokenizer of %r (%s); token ids only", spec, e)
            return None

    def for_run(run: Run) -> Decode | None:
        spec = run_model(run, model)
        return load(spec) if spec else None

    return for_run
