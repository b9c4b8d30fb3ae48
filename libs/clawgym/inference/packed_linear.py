"""The CPU engine's linear layers with their weights packed once for oneDNN, not on every call.

At decode's few rows (one token per running request) a linear layer is a thin matrix times the
whole weight matrix, and MKL's sgemm re-packs that weight into its blocked layout on every call:
for SmolLM2's 49,152 × 576 LM head that is most of the call. oneDNN takes the weight pre-packed
(`mkldnn._reorder_linear_weight`, what torch.compile's CPU freezing does), so the engine packs each
weight when it is loaded, and a hot reload's weights as they are read, off the loop thread.
`bench/packed_linear.py` measures both paths side by side. Which is faster depends on the CPU
and the layer's shape (oneDNN's kernels against MKL's): an engine in "auto" mode measures both on
each distinct shape of its model when it starts (`layers_worth_packing`) and packs only those
layers where packing wins.

Only an engine's own thread takes the packed path: a caller that shares the model object (a test's
teacher-forced forward, an embedded trainer, a second engine) runs its own path on it.
"""

import functools
import logging
import statistics
import threading
import time
import types
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)


@functools.cache
def packing_available() -> bool:
    """Whether this torch build can pack a linear weight for oneDNN (x86 CPU builds can); tried once."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        weight, x = torch.ones(8, 4), torch.ones(2, 4)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 2)
        out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except (AttributeError, RuntimeError):
        return False
    return bool(torch.equal(out, F.linear(x, weight)))


def _float32_cpu_linears(model: nn.Module) -> list[nn.Linear]:
    return [
        m
        for m in model.modules()
        if isinstance(m, nn.Linear) and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32
    ]


def layers_worth_packing(
    model: nn.Module, rows: int, rounds: int = 5, budget_mb: float = 0
) -> list[nn.Linear]:
    """The float32 CPU linear layers of `model` whose shape computes faster packed on this CPU, as
    measured here: for each distinct shape one layer at 1 and `rows` rows, both paths alternating,
    the median of `rounds`; packing must win by 5% (it costs a second copy of the weights). With a
    `budget_mb` (> 0), only as many as their packed copies fit, most time saved per byte first
    (`within_budget`).

    Why measure: oneDNN against MKL depends on the CPU, the shape and the load. On a 2-core AVX-512
    EPYC a whole SmolLM2-135M decode step ran 1.2-1.6x faster packed (bench/packed_linear.py); on
    an AVX2-only one, one thread beside another job, its 49,152 x 576 LM head ran 1.8x faster
    packed at 32 rows while the 576 x 576 projections ran 0.5x at 1 row and 0.86x at 32."""
    if not packing_available():
        return []
    by_shape: dict[tuple, list[nn.Linear]] = {}
    for layer in _float32_cpu_linears(model):
        by_shape.setdefault((tuple(layer.weight.shape), layer.bias is not None), []).append(layer)
    sizes = sorted({1, max(1, rows)})
    gains = []
    for (shape, _), layers in by_shape.items():
        plain_s, packed_s = _time_both(layers[0], sizes, rounds)
        pays = packed_s < 0.95 * plain_s
        if pays:
            gains.append(ShapeGain(layers, plain_s - packed_s, layers[0].weight.numel() * 4))
        log.info(
            "linear %s x%d: %s (packed %.3f ms, F.linear %.3f ms at %s rows)",
            "x".join(map(str, shape)), len(layers), "packed" if pays else "plain", 1e3 * packed_s,
            1e3 * plain_s, sizes,
        )  # fmt: skip
    keep = within_budget(gains, int(budget_mb * 2**20))
    if budget_mb > 0:
        log.info(
            "packed %d of %d layers that pay: %.0f MB of inference.pack_weights_mb %.0f",
            len(keep), sum(len(g.layers) for g in gains), sum(w.weight.numel() * 4 for w in keep) / 2**20, budget_mb,
        )  # fmt: skip
    return keep


@dataclass(frozen=True)
class ShapeGain:
    """The layers of one shape that compute faster packed, what packing saves per call of one of
    them, and what its packed copy costs."""

    layers: list[nn.Linear]
    saved_s: float
    layer_bytes: int


def within_budget(gains: list[ShapeGain], budget_bytes: int) -> list[nn.Linear]:
    """The layers to pack: all of them without a budget (0); else layer by layer, the shapes that save
    the most time per byte of their copy first, while the copies fit `budget_bytes`. (On a 2-core
    AVX-512 EPYC the 49,152 x 576 LM head and the MLP's down projections come first.)"""
    if budget_bytes <= 0:
        return [layer for g in gains for layer in g.layers]
    keep, used = [], 0
    for g in sorted(gains, key=lambda g: g.saved_s / g.layer_bytes, reverse=True):
        for layer in g.layers:
            if used + g.layer_bytes <= budget_bytes:
                keep.append(layer)
                used += g.layer_bytes
    return keep


def _time_both(layer: nn.Linear, sizes: list[int], rounds: int) -> tuple[float, float]:
    """(plain, packed) seconds of one pass over `sizes` rows, medians; small layers repeat their
    calls within a pass so that the clock's resolution does not decide."""
    reps = max(1, 2_000_000 // layer.weight.numel())
    with torch.no_grad():
        pack = torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), max(sizes))
        xs = [torch.randn(n, layer.in_features) for n in sizes]
        paths = {
            "plain": lambda x: F.linear(x, layer.weight, layer.bias),
            "packed": lambda x: torch.ops.mkldnn._linear_pointwise(x, pack, layer.bias, "none", [], ""),
        }
        times: dict[str, list[float]] = {"plain": [], "packed": []}
        for i in range(rounds + 1):  # the first round warms both up, untimed
            for name in ("plain", "packed") if i % 2 else ("packed", "plain"):
                t0 = time.perf_counter()
                for x in xs:
                    for _ in range(reps):
                        paths[name](x)
                if i:
                    times[name].append((time.perf_counter() - t0) / reps)
    return statistics.median(times["plain"]), statistics.median(times["packed"])


class PackedLinears:
    """Packs every float32 CPU `nn.Linear` of `model` for the thread that calls `own_thread`.

    Each layer's forward is patched once: it takes the packed weight registered for the calling
    thread, and plain `F.linear` on the live weight where none is (other threads, or a forward that
    needs gradients). Several engines may share one model object, each with its own thread.
    `targets` names the model's tensors as checkpoints do (`checkpoint.weight_targets`), so that a
    new checkpoint's weights are packed (`pack`, any thread) before the loop installs them."""

    def __init__(
        self,
        model: nn.Module,
        targets: dict[str, torch.Tensor],
        rows_hint: int,
        layers: list[nn.Linear] | None = None,
    ) -> None:
        """`layers`: the ones to pack (default: every float32 CPU linear layer of `model`)."""
        self.rows_hint = rows_hint  # oneDNN picks its blocking for this many rows
        self.layers = _float32_cpu_linears(model) if layers is None else layers
        if self.layers and not packing_available():
            log.info("this torch build cannot pack linear weights for oneDNN: plain F.linear")
            self.layers = []
        name_of = {id(tensor): name for name, tensor in targets.items()}
        self._names = {id(layer): name_of[id(layer.weight)] for layer in self.layers}  # tied: one name
        self._packed = self.pack()
        self._owner: int | None = None
        for layer in self.layers:
            _patch(layer)

    def own_thread(self) -> None:
        """Makes the calling thread (the engine's loop) the one that uses these packed weights."""
        self.release()
        self._owner = threading.get_ident()
        self._publish()

    def release(self) -> None:
        """Stops the owner thread's use of the packed weights and lets them be freed (engine close)."""
        if self._owner is not None:
            for layer in self.layers:
                _PACKS[layer].pop(self._owner, None)
        self._owner = None

    def pack(self, tensors: dict[str, torch.Tensor] | None = None) -> dict[int, torch.Tensor]:
        """Every layer's weight packed: from `tensors` (a checkpoint by target name) or, by default,
        the weights the model holds now. Any thread; `install` puts the result in use."""
        with torch.no_grad():
            return {
                id(layer): torch.ops.mkldnn._reorder_linear_weight(
                    (tensors[self._names[id(layer)]] if tensors is not None else layer.weight).detach(),
                    self.rows_hint,
                )
                for layer in self.layers
            }

    def install(self, packed: dict[int, torch.Tensor]) -> None:
        """Uses `packed` from the next forward on; call on the loop thread, with the new weights."""
        self._packed = packed
        self._publish()

    def _publish(self) -> None:
        if self._owner is not None:
            for layer in self.layers:
                _PACKS[layer][self._owner] = self._packed[id(layer)]


# {thread ident: packed weight} of each patched layer; weak, so a model's packs go with it, and a
# deep copy of a layer (a new key) computes plainly with its own weight.
_PACKS: "weakref.WeakKeyDictionary[nn.Linear, dict[int, torch.Tensor]]" = weakref.WeakKeyDictionary()


def _patch(layer: nn.Linear) -> None:
    if layer not in _PACKS:
        _PACKS[layer] = {}
        layer.forward = types.MethodType(_packed_forward, layer)  # a copy binds to itself


def _packed_forward(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    packs = _PACKS.get(layer)
    packed = packs.get(threading.get_ident()) if packs else None
    if packed is None or torch.is_grad_enabled() or x.dtype != torch.float32:
        return F.linear(x, layer.weight, layer.bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed, layer.bias, "none", [], "")
