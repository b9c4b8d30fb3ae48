"""The flat array form of a radix tree: what the RL code consumes and what the store keeps.

A `FlatTree` lists the tree's unique tokens once, in depth-first pre-order (children in insertion
order). Index u in [0, U) is a *tree position*: one distinct token prefix. Everything the trainer
needs is an array over positions, nodes, generated (rollout, position) pairs or rollout paths.
It does not compute advantages or tensors (that is `clawgym.rl`).

Serialisation: `to_dict()` holds little-endian numpy arrays as packed bytes (`clawgym.arrays`
encoding) plus JSON-able metadata; `to_bytes()` is one `.npz` archive of the same (no pickle).
"""

import io
import json
from dataclasses import dataclass

import numpy as np

from clawgym.errors import InvalidArgument
from clawgym.trajectory.radix import Generated, Node, RadixTree, RolloutInfo

_I32 = np.dtype("<i4")
_F32 = np.dtype("<f4")
_ARRAYS = {  # name -> dtype of every array field, in serialisation order
    "tokens": _I32, "node_start": _I32, "node_len": _I32, "node_parent": _I32,
    "member_node": _I32, "member_rollout": _I32, "end_node": _I32, "end_rollout": _I32,
    "gen_pos": _I32, "gen_rollout": _I32, "gen_logprob": _F32, "gen_version": _I32, "gen_temperature": _F32,
}  # fmt: skip


@dataclass(frozen=True)
class FlatTree:
    """A radix tree as arrays. U positions, N nodes, G generated pairs, P rollout paths."""

    rollouts: list[RolloutInfo]
    tokens: np.ndarray  # int32 (U,) token id at each position, pre-order
    node_start: np.ndarray  # int32 (N,) first position of each node's edge
    node_len: np.ndarray  # int32 (N,) edge length
    node_parent: np.ndarray  # int32 (N,) parent node, -1 under the root
    member_node: np.ndarray  # int32 (M,) (node, rollout) pairs: the rollout passes through the node
    member_rollout: np.ndarray  # int32 (M,)
    end_node: np.ndarray  # int32 (E,) (node, rollout) pairs: a sequence of the rollout ends there
    end_rollout: np.ndarray  # int32 (E,)
    gen_pos: np.ndarray  # int32 (G,) (position, rollout) pairs where the rollout generated the token
    gen_rollout: np.ndarray  # int32 (G,)
    gen_logprob: np.ndarray  # float32 (G,) engine logprob of that generation
    gen_version: np.ndarray  # int32 (G,) policy version of that generation
    gen_temperature: np.ndarray  # float32 (G,) temperature of its engine logprob (NaN: unknown)
    call_tokens: int = 0

    # --- derived views ---

    @property
    def n_positions(self) -> int:
        return int(self.tokens.shape[0])

    def node_of(self, pos: np.ndarray) -> np.ndarray:
        """Node index of each position."""
        return (np.searchsorted(self.node_start, pos, side="right") - 1).astype(np.int32)

    def parent(self) -> np.ndarray:
        """int32 (U,): the position just above each position on its path, -1 at depth 0."""
        par = np.arange(-1, self.n_positions - 1, dtype=np.int32)
        up = self.node_parent
        par[self.node_start] = np.where(up >= 0, self.node_start[up] + self.node_len[up] - 1, -1)
        return par

    def depth(self) -> np.ndarray:
        """int32 (U,): the number of tokens above each position: its position id."""
        node_depth = np.zeros(len(self.node_start), dtype=np.int32)
        for n, up in enumerate(self.node_parent):  # parents come before children in pre-order
            node_depth[n] = 0 if up < 0 else node_depth[up] + self.node_len[up]
        offset = np.repeat(node_depth - self.node_start, self.node_len)
        return (np.arange(self.n_positions, dtype=np.int32) + offset).astype(np.int32)

    def subtree_end(self) -> np.ndarray:
        """int32 (U,): one past the last pre-order position below each position. Every token of an
        edge shares its node's end, so position v is below-or-at u iff u <= v < subtree_end[u]."""
        node_end = self.node_start + self.node_len
        for n in range(len(self.node_start) - 1, -1, -1):  # children after parents in pre-order
            up = self.node_parent[n]
            if up >= 0:
                node_end[up] = max(node_end[up], node_end[n])
        return np.repeat(node_end, self.node_len).astype(np.int32)

    def rollout_paths(self) -> tuple[np.ndarray, np.ndarray]:
        """(rollout (P,), end node (P,)) of every maximal sequence end of every rollout, sorted by
        end node then rollout (the same paths as `RadixTree.rollout_paths`)."""
        continues = set(
            zip(self.node_parent[self.member_node].tolist(), self.member_rollout.tolist(), strict=True)
        )
        pairs = sorted(
            (n, r)
            for n, r in zip(self.end_node.tolist(), self.end_rollout.tolist(), strict=True)
            if (n, r) not in continues
        )
        arr = np.asarray(pairs, dtype=np.int32).reshape(-1, 2)
        return arr[:, 1].copy(), arr[:, 0].copy()

    def path_positions(self, end_node: int) -> np.ndarray:
        """int64 (L,): the positions from the root down to the end of `end_node`, in order."""
        chain = []
        n = int(end_node)
        while n >= 0:
            chain.append(n)
            n = int(self.node_parent[n])
        return np.concatenate(
            [np.arange(self.node_start[n], self.node_start[n] + self.node_len[n]) for n in reversed(chain)]
        )

    # --- back to a radix tree ---

    def to_radix(self) -> RadixTree:
        tree = RadixTree()
        for info in self.rollouts:
            tree.add_rollout(RolloutInfo(info.id, info.group_id, info.reward))
        nodes: list[Node] = []
        for n in range(len(self.node_start)):
            up = int(self.node_parent[n])
            parent = tree.root if up < 0 else nodes[up]
            edge = self.tokens[self.node_start[n] : self.node_start[n] + self.node_len[n]].copy()
            node = Node(edge, parent)
            parent.children[int(edge[0])] = node
            nodes.append(node)
        for n, r in zip(self.member_node.tolist(), self.member_rollout.tolist(), strict=True):
            nodes[n].rollouts.add(r)
        for n, r in zip(self.end_node.tolist(), self.end_rollout.tolist(), strict=True):
            nodes[n].ends.add(r)
        gen_node = self.node_of(self.gen_pos)
        for g in range(len(self.gen_pos)):
            node, r = nodes[gen_node[g]], int(self.gen_rollout[g])
            span = node.generated.get(r)
            if span is None:
                size = len(node)
                nan = np.full(size, np.nan, np.float32)
                span = Generated(np.zeros(size, bool), nan, np.full(size, -1, np.int32), nan.copy())
                node.generated[r] = span
            k = int(self.gen_pos[g] - self.node_start[gen_node[g]])
            span.mask[k], span.logprobs[k], span.versions[k] = True, self.gen_logprob[g], self.gen_version[g]
            span.temperatures[k] = self.gen_temperature[g]
        tree.call_tokens = self.call_tokens
        return tree

    # --- serialisation ---

    def to_dict(self) -> dict:
        """JSON-able metadata plus packed little-endian bytes per array."""
        out: dict = {
            name: np.ascontiguousarray(getattr(self, name), dtype=dt).tobytes()
            for name, dt in _ARRAYS.items()
        }
        out["rollouts"] = [{"id": r.id, "group_id": r.group_id, "reward": r.reward} for r in self.rollouts]
        out["call_tokens"] = int(self.call_tokens)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "FlatTree":
        try:
            arrays = {name: _unpack(data[name], dt, name) for name, dt in _ARRAYS.items()}
            rollouts = [
                RolloutInfo(str(r["id"]), str(r["group_id"]), float(r["reward"])) for r in data["rollouts"]
            ]
        except KeyError as exc:
            raise InvalidArgument(f"serialised tree lacks {exc}") from None
        flat = cls(rollouts=rollouts, call_tokens=int(data.get("call_tokens", 0)), **arrays)
        flat.validate()
        return flat

    def to_bytes(self) -> bytes:
        """One `.npz` archive (no pickle): the arrays plus a JSON metadata entry."""
        d = self.to_dict()
        meta = json.dumps({"rollouts": d.pop("rollouts"), "call_tokens": d.pop("call_tokens")}).encode()
        buf = io.BytesIO()
        np.savez(
            buf,
            meta=np.frombuffer(meta, dtype=np.uint8),
            **{k: np.frombuffer(v, np.uint8) for k, v in d.items()},
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "FlatTree":
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                d = {k: z[k].tobytes() for k in z.files}
        except (ValueError, OSError, EOFError) as exc:
            raise InvalidArgument(f"not a serialised tree: {exc}") from None
        if "meta" not in d:
            raise InvalidArgument("not a serialised tree: no metadata")
        d.update(json.loads(d.pop("meta").decode()))
        return cls.from_dict(d)

    def validate(self) -> None:
        """Raise InvalidArgument when the arrays do not describe a tree."""
        n_nodes, U, R = len(self.node_start), self.n_positions, len(self.rollouts)
        if len(self.node_len) != n_nodes or len(self.node_parent) != n_nodes:
            raise InvalidArgument("node arrays differ in length")
        if int(self.node_len.sum()) != U or (n_nodes and (self.node_len <= 0).any()):
            raise InvalidArgument("node lengths do not cover the tokens")
        if n_nodes and not np.array_equal(
            self.node_start, np.concatenate([[0], np.cumsum(self.node_len)[:-1]])
        ):
            raise InvalidArgument("nodes are not contiguous in pre-order")
        if (self.node_parent >= np.arange(n_nodes)).any() or (self.node_parent < -1).any():
            raise InvalidArgument("a node's parent must come before it")
        for nodes, rollouts in ((self.member_node, self.member_rollout), (self.end_node, self.end_rollout)):
            if len(nodes) != len(rollouts) or ((nodes < 0) | (nodes >= n_nodes)).any():
                raise InvalidArgument("node index out of range")
            if ((rollouts < 0) | (rollouts >= R)).any():
                raise InvalidArgument("rollout index out of range")
        g = len(self.gen_pos)
        if (
            not len(self.gen_rollout)
            == len(self.gen_logprob)
            == len(self.gen_version)
            == len(self.gen_temperature)
            == g
        ):
            raise InvalidArgument("generated arrays differ in length")
        if ((self.gen_pos < 0) | (self.gen_pos >= U)).any() or (
            (self.gen_rollout < 0) | (self.gen_rollout >= R)
        ).any():
            raise InvalidArgument("generated pair out of range")


def flatten(tree: RadixTree) -> FlatTree:
    """The flat form of `tree` (pre-order, children in insertion order)."""
    index: dict[int, int] = {}
    tokens, starts, lens, parents = [], [], [], []
    member_n, member_r, end_n, end_r = [], [], [], []
    gen_pos, gen_r, gen_lp, gen_v, gen_t = [], [], [], [], []
    start = 0
    for n, node in enumerate(tree.nodes()):
        index[id(node)] = n
        tokens.append(node.tokens)
        starts.append(start)
        lens.append(len(node))
        parents.append(index[id(node.parent)] if node.parent is not tree.root else -1)
        for r in sorted(node.rollouts):
            member_n.append(n)
            member_r.append(r)
        for r in sorted(node.ends):
            end_n.append(n)
            end_r.append(r)
        for r in sorted(node.generated):
            span = node.generated[r]
            where = np.flatnonzero(span.mask)
            gen_pos.append(where + start)
            gen_r.append(np.full(where.shape, r))
            gen_lp.append(span.logprobs[where])
            gen_v.append(span.versions[where])
            gen_t.append(span.temperatures[where])
        start += len(node)

    def cat(parts: list, dtype: np.dtype) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    return FlatTree(
        rollouts=[RolloutInfo(r.id, r.group_id, r.reward) for r in tree.rollouts],
        tokens=cat(tokens, np.int32),
        node_start=np.asarray(starts, np.int32),
        node_len=np.asarray(lens, np.int32),
        node_parent=np.asarray(parents, np.int32),
        member_node=np.asarray(member_n, np.int32),
        member_rollout=np.asarray(member_r, np.int32),
        end_node=np.asarray(end_n, np.int32),
        end_rollout=np.asarray(end_r, np.int32),
        gen_pos=cat(gen_pos, np.int32),
        gen_rollout=cat(gen_r, np.int32),
        gen_logprob=cat(gen_lp, np.float32),
        gen_version=cat(gen_v, np.int32),
        gen_temperature=cat(gen_t, np.float32),
        call_tokens=tree.call_tokens,
    )


def _unpack(data: bytes, dtype: np.dtype, name: str) -> np.ndarray:
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) % dtype.itemsize:
        raise InvalidArgument(f"array {name!r} is not packed {dtype} bytes")
    return np.frombuffer(bytes(data), dtype=dtype).astype(dtype.newbyteorder("="))
