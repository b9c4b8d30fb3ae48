"""The trained policy as one module: the causal LM (optionally with LoRA adapters) and a value head.

Owns building the policy a config asks for (model spec or checkpoint folder, dtype, attention
backend, LoRA, value head for PPO, frozen reference for KL) and `PolicyModule.forward`, the one
entry point every forward goes through, so that FSDP2's hooks on the root module see all of them.
It does not define losses or the update (`update.py`); the packed forward itself is
`clawgym.rl.forward`.
"""

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from clawgym.errors import InvalidArgument
from clawgym.rl.forward import ValueHead, hidden_states, packed_forward, value_features
from clawgym.rl.packing import LossRows, PackedSequence
from clawgym.rl.tree_attention import TREE_ATTENTION
from clawgym.trainer.config import ALL_LINEAR, LoraSettings, TrainerConfig


class PolicyModule(nn.Module):
    """The LM (`lm`, an HF causal LM; LoRA layers injected in place) and an optional value head.
    Logprobs are of softmax(logits / `temperature`), the rollouts' sampling distribution; `autocast`
    (`trainer.autocast`) is the dtype every forward, and so its backward, computes in, if any."""

    def __init__(
        self,
        lm: nn.Module,
        value_head: nn.Module | None = None,
        temperature: float = 1.0,
        autocast: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.lm = lm
        self.value_head = value_head
        self.temperature = temperature
        self.autocast = autocast

    def forward(
        self,
        pack: PackedSequence | None,
        mode: str = "rows",
        entropy_grad: bool = False,
        features: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        """mode "rows": (logprob (C,), entropy (C,), values (V,) or empty) at the pack's loss rows;
        mode "rows+features": those and the (V, H) hidden states the values read, detached;
        mode "values": (V_old at every owned slot with a parent, (S,)) for GAE, in slot order;
        mode "features": (the hidden state each value row's V reads, (V, H)), no gradient;
        mode "head": (the value head on `features` (N, H), (N,)), no pack: value-only passes.
        Every mode goes through here so that FSDP2's root hooks gather the value head's shards."""
        if self.autocast is None:
            return self._forward(pack, mode, entropy_grad, features)
        device = next(self.lm.parameters()).device.type
        with torch.autocast(device, dtype=self.autocast):
            out = self._forward(pack, mode, entropy_grad, features)
        return tuple(t.float() if t.is_floating_point() else t for t in out)

    def _forward(
        self, pack: PackedSequence | None, mode: str, entropy_grad: bool, features: Tensor | None
    ) -> tuple[Tensor, ...]:
        if mode in ("values", "features", "head"):
            assert self.value_head is not None, "values need a value head"
        if mode == "head":
            assert features is not None
            return (self.value_head(features),)
        if mode == "features":
            assert pack is not None
            with torch.no_grad():
                return (value_features(hidden_states(self.lm, pack), pack),)
        assert pack is not None
        if mode == "values":
            hidden = hidden_states(self.lm, pack)
            slots = value_slots(pack).to(hidden.device)
            return (self.value_head(hidden[pack.parent.to(hidden.device)[slots]]),)
        out = packed_forward(
            self.lm, pack, self.value_head, entropy_grad=entropy_grad, temperature=self.temperature
        )
        values = out.values if out.values is not None else out.logprob.new_zeros(0)
        if mode == "rows+features":  # and the (V, H) hidden states the values read, detached
            features = out.value_features if out.value_features is not None else out.logprob.new_zeros(0, 0)
            return out.logprob, out.entropy, values, features
        return out.logprob, out.entropy, values

    def decoder_layers(self) -> list[nn.Module]:
        """The LM's transformer blocks (FSDP2's units)."""
        return list(self.lm.get_decoder().layers)


def value_slots(pack: PackedSequence) -> Tensor:
    """Slots whose state value GAE needs: owned tokens with a parent (the value of the prefix before them)."""
    return torch.nonzero(pack.owned & (pack.parent >= 0)).squeeze(1)


def dummy_pack(token_id: int = 0) -> PackedSequence:
    """A one-token pack with no loss rows: what a rank with fewer micro-batches forwards (zero-weighted)
    so that every rank runs the same collectives under FSDP2."""
    zl, zf = torch.zeros(0, dtype=torch.long), torch.zeros(0)
    rows = LossRows(
        token=zl, engine_logprob=zf, adv_pos=zf, adv_neg=zf, weight=zf, version=zl, temperature=zf, seq=zl,
        value_token=zl, returns=zf, old_value=zf, value_weight=zf,
    )  # fmt: skip
    one = torch.tensor([token_id])
    return PackedSequence(
        input_ids=one,
        position_ids=torch.zeros(1, dtype=torch.long),
        parent=torch.tensor([-1]),
        subtree_end=torch.tensor([1]),
        tree_pos=torch.zeros(1, dtype=torch.long),
        owned=torch.tensor([True]),
        rows=rows,
    )


@dataclass
class BuiltPolicy:
    """What `build_policy` returns: the module to train, its frozen reference, and the LoRA wrapper."""

    module: PolicyModule
    reference: PolicyModule | None  # frozen initial policy, for the KL term
    lora: LoraSettings | None  # set when the LM carries adapters (checkpoints merge them)


def build_policy(
    cfg: TrainerConfig,
    weights: str | None = None,
    value_head_state: dict | None = None,
    device: torch.device | str = "cpu",
    cache_dir: str | None = None,
) -> BuiltPolicy:
    """The policy of `cfg.model` (a built-in one built into `cache_dir`, `inference.cache_dir`), or the
    weights of checkpoint folder `weights` (a full HF folder), for training on `device`.

    Attention: eager and flex_attention are kept as the model's config sets them; anything else
    becomes block-sparse tree attention (`rl.tree_attention`) on the CPU, where it computes the
    same as SDPA with the dense tree mask with a fraction of the pairs, and SDPA on a GPU (there
    tree attention's gathered keys grow with depth / block; FlexAttention is the block-sparse path).

    With LoRA, `weights` is the base model's folder and the adapters are loaded by the caller
    (`checkpoint.load_adapters`). The value head (PPO) starts from `value_head_state` if given,
    else from a seeded init.
    """
    from clawgym.policies import load_model

    dtype = getattr(torch, cfg.dtype)
    autocast = None if cfg.autocast == "off" else getattr(torch, cfg.autocast)

    def load(spec: str, strict: bool) -> nn.Module:
        lm = load_model(spec, dtype=dtype, cache_dir=cache_dir, strict=strict)
        if lm.config._attn_implementation not in ("eager", "flex_attention"):
            # tree packing needs a backend that takes a mask or a block layout (rl/forward.py)
            lm.set_attn_implementation(TREE_ATTENTION if torch.device(device).type == "cpu" else "sdpa")
        return lm

    lm = load(weights or cfg.model, strict=weights is not None)
    reference = None
    if cfg.algorithm.needs_reference:
        # the *initial* policy (`cfg.model`), also when the trainer resumes from a checkpoint's weights
        initial = copy.deepcopy(lm) if weights is None else load(cfg.model, strict=False)
        reference = PolicyModule(
            initial.requires_grad_(False).eval(), temperature=cfg.algorithm.temperature, autocast=autocast
        )
    lora = None
    if cfg.lora.enabled:
        lm = add_lora(lm, cfg.lora)
        lora = cfg.lora
    if cfg.trained_layers:
        freeze_below(lm, cfg.trained_layers)
    value_head = None
    if cfg.algorithm.name == "ppo":
        torch.manual_seed(cfg.seed)
        value_head = ValueHead(lm.config.get_text_config().hidden_size, dtype=dtype)
        if value_head_state is not None:
            value_head.load_state_dict(value_head_state)
    if cfg.activation_checkpointing:
        checkpoint_activations(lm)
    lm.train()
    module = PolicyModule(lm, value_head, temperature=cfg.algorithm.temperature, autocast=autocast)
    return BuiltPolicy(module=module, reference=reference, lora=lora)


def checkpoint_activations(lm: nn.Module) -> None:
    """Recomputes each decoder layer's activations in the backward instead of keeping them.

    Non-reentrant: works with inputs that need no grad (frozen embeddings under LoRA) and with FSDP2,
    so transformers' hook that makes the embeddings' output require grad (for reentrant checkpoints) is
    removed: it carried every backward down through frozen lower layers (`freeze_below`).
    transformers 5.25 renamed the call; vLLM's pin keeps its image on an older one."""
    kwargs = {"use_reentrant": False}
    if hasattr(lm, "activation_checkpointing_enable"):
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    with contextlib.suppress(AttributeError):  # older transformers add no hook, and removing none raises
        lm.disable_input_require_grads()


def freeze_below(lm: nn.Module, trained_layers: int) -> None:
    """Freezes all but the top `trained_layers` decoder layers and the final norm: the embeddings, the
    LM head (tied to them in small models) and the layers below. Nothing below the lowest trained layer
    needs a gradient, so autograd records no graph there and the backward stops at it (its forward
    costs what inference does). Under LoRA only the trained layers' adapters keep training."""
    layers = lm.get_decoder().layers
    if not 1 <= trained_layers <= len(layers):
        raise InvalidArgument(
            f"trainer.trained_layers: {trained_layers}, but the model has {len(layers)} layers"
        )
    lm.get_input_embeddings().requires_grad_(False)
    lm.get_output_embeddings().requires_grad_(False)
    for layer in layers[: len(layers) - trained_layers]:
        layer.requires_grad_(False)


def add_lora(lm: nn.Module, settings: LoraSettings) -> nn.Module:
    """Injects LoRA adapters into `lm` in place (peft) and freezes everything else; returns `lm`.

    The HF model itself is kept (not the PeftModel wrapper): `clawgym.rl.forward` calls its base
    model and LM head directly, and the injected layers are part of them.
    """
    from peft import LoraConfig, inject_adapter_in_model

    targets = list(settings.target_modules)
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        # peft's "all-linear": every linear layer of the decoder, whatever the model names them
        target_modules=ALL_LINEAR if targets == [ALL_LINEAR] else targets,
        bias="none",
    )
    lm = inject_adapter_in_model(config, lm)
    for name, param in lm.named_parameters():
        param.requires_grad_("lora_" in name)
    return lm


def merge_lora_state(state: dict[str, Tensor], settings: LoraSettings) -> dict[str, Tensor]:
    """The plain model's state dict from one with LoRA layers: W = W_base + (alpha / r) B A per adapted
    layer, adapter tensors dropped, `base_layer.` removed from names. Pure; the inputs are unchanged."""
    scale = settings.alpha / settings.r
    merged: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if "lora_" in name:
            continue
        if ".base_layer." not in name:
            merged[name] = tensor
            continue
        prefix, _, leaf = name.rpartition(".base_layer.")
        out_name = f"{prefix}.{leaf}"
        if leaf == "weight":
            a = state[f"{prefix}.lora_A.default.weight"].float()
            b = state[f"{prefix}.lora_B.default.weight"].float()
            merged[out_name] = (tensor.float() + scale * (b @ a)).to(tensor.dtype)
        else:
            merged[out_name] = tensor
    return merged
