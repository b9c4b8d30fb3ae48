"""RL on prefix trees: advantages (GRPO, GAE), loss terms on trees, tree packing, losses."""

from clawgym.rl.advantages import gae, grpo_advantages
from clawgym.rl.forward import PackedOutput, ValueHead, old_logprobs, packed_forward, values_by_position
from clawgym.rl.losses import LossConfig, combine_diagnostics, rows_loss, tree_loss
from clawgym.rl.packing import LossRows, PackedSequence, pack
from clawgym.rl.terms import (
    PathTerms,
    TokenTerms,
    ValueTerms,
    gae_terms,
    grpo_terms,
    merge_terms,
    value_terms,
)

__all__ = [
    "LossConfig",
    "LossRows",
    "PackedOutput",
    "PackedSequence",
    "PathTerms",
    "TokenTerms",
    "ValueHead",
    "ValueTerms",
    "combine_diagnostics",
    "gae",
    "gae_terms",
    "grpo_advantages",
    "grpo_terms",
    "merge_terms",
    "old_logprobs",
    "pack",
    "packed_forward",
    "rows_loss",
    "tree_loss",
    "value_terms",
    "values_by_position",
]
