"""Renders a radix tree for people (`clawgym rollout`, `TRAJ_DUMP`-style debugging) with `rich`.

Each node shows its length, how many rollouts share it, how many of its tokens are generated and,
given a `decode` function (e.g. `tokenizer.decode`), a short preview of its text. Read-only.
"""

from collections.abc import Callable, Sequence

import numpy as np
from rich.text import Text
from rich.tree import Tree

from clawgym.trajectory.radix import Node, RadixTree


def node_label(
    tree: RadixTree, node: Node, decode: Callable[[Sequence[int]], str] | None = None, preview: int = 48
) -> Text:
    """One line for `node`: tokens, shared-by count, generated count, rollouts, text preview."""
    n_gen = 0
    if node.generated:
        n_gen = int(np.stack([g.mask for g in node.generated.values()]).any(axis=0).sum())
    label = Text()
    label.append(f"{len(node)} tok", style="bold")
    shared = len(node.rollouts)
    label.append(
        f" · shared ×{shared}" if shared > 1 else " · 1 rollout", style="cyan" if shared > 1 else "dim"
    )
    if n_gen:
        label.append(f" · {n_gen} generated", style="green")
    names = ",".join(tree.rollouts[r].id for r in sorted(node.rollouts))
    label.append(f" [{names[:40]}{'…' if len(names) > 40 else ''}]", style="dim")
    if node.ends:
        label.append(" ■", style="magenta")
    if decode is not None:
        text = decode([int(t) for t in node.tokens[:preview]]).replace("\n", "⏎")
        label.append(f"  {text[:preview]!r}{'…' if len(node) > preview else ''}", style="italic")
    else:
        head = " ".join(str(int(t)) for t in node.tokens[:8])
        label.append(f"  {head}{' …' if len(node) > 8 else ''}", style="italic")
    return label


def render_tree(
    tree: RadixTree, decode: Callable[[Sequence[int]], str] | None = None, max_nodes: int = 200
) -> Tree:
    """A `rich.tree.Tree` of `tree` (stops after `max_nodes` nodes, saying how many were left out)."""
    s = tree.stats()
    root = Tree(
        Text(
            f"{s.n_rollouts} rollouts · {s.n_paths} paths · {s.unique_tokens} unique / {s.path_tokens} path tokens "
            f"(sharing ×{s.sharing_ratio:.2f}) · {s.trainable_tokens} trainable · {s.branch_points} branch points",
            style="bold",
        )
    )
    shown = 0
    stack: list[tuple[Tree, Node]] = [(root, c) for c in reversed(tree.root.children.values())]
    while stack:
        parent, node = stack.pop()
        if shown == max_nodes:
            root.add(Text(f"… {s.n_nodes - shown} more nodes", style="dim"))
            break
        branch = parent.add(node_label(tree, node, decode))
        shown += 1
        stack.extend((branch, c) for c in reversed(node.children.values()))
    return root
