"""Prefix trees over token ids: the radix tree, its flat array form, builders from store records."""

from clawgym.trajectory.builder import (
    insert_call,
    tree_from_calls,
    tree_from_group,
    tree_from_groups,
    tree_from_rollout,
)
from clawgym.trajectory.flat import FlatTree, flatten
from clawgym.trajectory.radix import Generated, Node, RadixTree, RolloutInfo, TreeStats
from clawgym.trajectory.render import render_tree
from clawgym.trajectory.view import rollout_view

__all__ = [
    "FlatTree",
    "Generated",
    "Node",
    "RadixTree",
    "RolloutInfo",
    "TreeStats",
    "flatten",
    "insert_call",
    "render_tree",
    "rollout_view",
    "tree_from_calls",
    "tree_from_group",
    "tree_from_groups",
    "tree_from_rollout",
]
