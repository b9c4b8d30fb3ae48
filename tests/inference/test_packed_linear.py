"""The engine's packed linear weights: the owner thread computes with the packed copy, which equals
F.linear and follows new weights only once their pack is installed; every other thread, and any
forward that needs gradients, runs plain F.linear on the live weights."""

import copy as copy_module
import threading

import pytest
import torch
from torch import nn

from clawgym.inference.batch_loop import BatchLoop
from clawgym.inference.checkpoint import weight_targets
from clawgym.inference.config import InferenceConfig
from clawgym.inference.packed_linear import (
    PackedLinears,
    ShapeGain,
    layers_worth_packing,
    packing_available,
    within_budget,
)

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch build cannot pack for oneDNN")


def _in_thread(fn):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("y", fn()))
    thread.start()
    thread.join()
    return out["y"]


def _packed(model: nn.Module, rows_hint: int) -> PackedLinears:
    return PackedLinears(model, weight_targets(model)[0], rows_hint=rows_hint)


def test_the_owner_uses_the_packed_copy_until_a_new_pack_is_installed_and_others_use_the_live_weight():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.Linear(96, 32, bias=False))
    x = torch.randn(5, 7, 64)
    packed = _packed(model, rows_hint=8)
    packed.own_thread()
    assert len(packed.layers) == 2
    with torch.inference_mode():
        before = model(x)
        assert (
            before - nn.functional.linear(nn.functional.linear(x, *model[0].parameters()), model[1].weight)
        ).abs().max() < 1e-5
        doubled = {"1.weight": 2 * model[1].weight}
        new_pack = _in_thread(
            lambda: packed.pack({**weight_targets(model)[0], **doubled})
        )  # as a reload reads it
        model[1].weight.copy_(doubled["1.weight"])  # the loop swaps the weights in...
        stale = model(x)
        other = _in_thread(lambda: model(x))
        packed.install(new_pack)  # ...and their pack
        fresh = model(x)
    assert torch.allclose(stale, before, atol=1e-6), "the owner thread reads the packed copy"
    assert torch.allclose(other, 2 * before, atol=1e-4), "another thread reads the live weight"
    assert torch.allclose(fresh, 2 * before, atol=1e-4), (
        "with the new pack installed the owner follows the new weight"
    )


def test_a_forward_that_needs_gradients_or_another_dtype_takes_the_plain_path():
    torch.manual_seed(1)
    layer = nn.Linear(16, 8)
    packed = _packed(layer, rows_hint=4)
    packed.own_thread()
    with torch.no_grad():
        layer.weight.add_(1.0)  # the pack is stale: only the plain path sees this
    x = torch.randn(3, 16)
    y = layer(x)  # grad enabled: a training forward
    assert y.requires_grad and torch.allclose(y, nn.functional.linear(x, layer.weight, layer.bias))
    with torch.inference_mode():
        assert not torch.allclose(layer(x), y, atol=1e-3), "inference on the owner thread reads the pack"
        y64 = layer.double()(x.double())
    assert torch.allclose(y64, nn.functional.linear(x.double(), layer.weight, layer.bias))


def test_two_owners_share_a_model_each_with_its_pack_and_a_released_or_copied_layer_computes_plainly():
    torch.manual_seed(2)
    layer = nn.Linear(32, 16)
    x = torch.randn(4, 32)
    first, second = _packed(layer, rows_hint=4), _packed(layer, rows_hint=4)
    first.own_thread()
    with torch.no_grad():
        plain = nn.functional.linear(x, layer.weight, layer.bias)
        second_pack = second.pack({"weight": 3 * layer.weight, "bias": layer.bias})
    second.install(second_pack)  # not yet owned: nothing uses it

    def as_second():
        second.own_thread()
        with torch.inference_mode():
            return layer(x)

    with torch.inference_mode():
        y_second = _in_thread(as_second)
        y_first = layer(x)
        copy = copy_module.deepcopy(layer)
        with torch.no_grad():
            copy.weight.mul_(-1.0)
        y_copy = copy(x)
        first.release()
        layer.weight.mul_(2.0)
        y_released = layer(x)
    assert torch.allclose(y_first, plain, atol=1e-5), "the first owner reads its own pack"
    assert torch.allclose(y_second, nn.functional.linear(x, 3 * layer.weight / 2, layer.bias), atol=1e-4), (
        "the second owner's thread reads the second pack"
    )
    assert torch.allclose(y_copy, nn.functional.linear(x, -layer.weight / 2, layer.bias), atol=1e-5), (
        "a deep copy computes with its own weight, not the original's pack"
    )
    assert torch.allclose(y_released, nn.functional.linear(x, layer.weight, layer.bias), atol=1e-5), (
        "after release the former owner computes with the live weight"
    )


def test_auto_packs_only_the_shapes_it_measured_faster_packed_and_nothing_without_float32_linears(
    tiny_model, caplog
):
    assert layers_worth_packing(nn.Linear(64, 64).to(torch.bfloat16), rows=8) == [], "nothing to pack"
    with caplog.at_level("INFO", logger="clawgym.inference.packed_linear"):
        loop = BatchLoop(
            tiny_model, weight_targets(tiny_model)[0], max_context=64, max_batch=8, kv_cache_mb=64,
            prefill_chunk=64, policy_version=0, pack_weights="auto",
        )  # fmt: skip
    try:
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("linear ")]
        linears = [m for m in tiny_model.modules() if isinstance(m, nn.Linear)]
        shapes = {(tuple(m.weight.shape), m.bias is not None) for m in linears}
        assert len(lines) == len(shapes), lines  # one measurement per distinct shape
        packed_shapes = {line.split()[1] for line in lines if ": packed (" in line}
        chosen = [m for m in linears if "x".join(map(str, m.weight.shape)) in packed_shapes]
        if chosen:
            assert loop.packed is not None and set(map(id, loop.packed.layers)) == set(map(id, chosen)), lines
        else:
            assert loop.packed is None, lines
    finally:
        loop.close()
    assert InferenceConfig(pack_weights="auto").pack_weights == "auto"
    assert InferenceConfig(pack_weights=False).pack_weights is False
    with pytest.raises(ValueError):
        InferenceConfig(pack_weights="sometimes")


def test_a_packing_budget_takes_the_most_time_saved_per_byte_first_and_never_exceeds_it():
    head = [nn.Linear(64, 1024, bias=False)]  # 256 KiB copy, saves 4 ms: 15.6 ns a byte
    down = [nn.Linear(256, 64, bias=False) for _ in range(3)]  # 64 KiB each, 2 ms each: 30.5 ns a byte
    attn = [nn.Linear(64, 64, bias=False) for _ in range(4)]  # 16 KiB each, 0.1 ms each: 6.1 ns a byte
    gains = [
        ShapeGain(attn, 0.1e-3, 64 * 64 * 4),
        ShapeGain(head, 4e-3, 64 * 1024 * 4),
        ShapeGain(down, 2e-3, 256 * 64 * 4),
    ]
    assert within_budget(gains, 0) == attn + head + down, "no budget: every layer that measured faster"
    assert within_budget(gains, 3 * 2**16) == down, "the down projections save the most per byte"
    assert within_budget(gains, 3 * 2**16 + 2**18 + 2**15) == down + head + attn[:2], (
        "then the head, then as many small layers as still fit"
    )
    assert within_budget(gains, 2**10) == [], "nothing fits 1 KiB"


def test_an_engine_packs_within_its_budget(tiny_model, caplog):
    targets = weight_targets(tiny_model)[0]
    budget_mb = 0.05  # 52 KB: less than any of tiny-qwen3's float32 linear layers
    assert min(m.weight.numel() * 4 for m in tiny_model.modules() if isinstance(m, nn.Linear)) > budget_mb * 2**20
    with caplog.at_level("INFO", logger="clawgym.inference.packed_linear"):
        loop = BatchLoop(
            tiny_model, targets, max_context=64, max_batch=8, kv_cache_mb=64, prefill_chunk=64,
            policy_version=0, pack_weights="auto", pack_weights_mb=budget_mb,
        )  # fmt: skip
    try:
        budget_lines = [r.getMessage() for r in caplog.records if "inference.pack_weights_mb" in r.getMessage()]
        assert len(budget_lines) == 1 and budget_lines[0].startswith("packed 0 of "), (
            f"the engine's budget reaches the choice, and no layer's copy fits it: {budget_lines}"
        )
        assert loop.packed is None, "no layer's packed copy fits the budget"
    finally:
        loop.close()
    assert InferenceConfig(pack_weights_mb=256).pack_weights_mb == 256
    with pytest.raises(ValueError):
        InferenceConfig(pack_weights_mb=-1)


def test_a_model_with_some_layers_packed_computes_as_the_plain_model():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    x = torch.randn(3, 32)
    with torch.inference_mode():
        plain = model(x)
    packed = PackedLinears(model, weight_targets(model)[0], rows_hint=4, layers=[model[0], model[4]])
    packed.own_thread()
    try:
        assert packed.layers == [model[0], model[4]]
        with torch.inference_mode():
            assert torch.allclose(model(x), plain, atol=1e-5)
            with torch.no_grad():
                model[0].weight.mul_(0.5)  # a stale pack shows that the first layer reads its pack
            assert torch.allclose(model(x), plain, atol=1e-5)
            model[2].weight.mul_(0.5)  # the unpacked middle layer reads its live weight
            assert not torch.allclose(model(x), plain, atol=1e-3)
    finally:
        packed.release()
