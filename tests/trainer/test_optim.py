"""With β1 = 0 the trainer's optimizer keeps no first moment and makes AdamW's update: the same weights
as `torch.optim.AdamW(betas=(0, β2))` step after step (weight decay, a changing learning rate, a
parameter without a gradient), with one buffer per parameter instead of two."""

import torch

from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.optim import CHUNK, MomentumFreeAdamW, make_optimizer
from clawgym.trainer.policy import build_policy


def test_momentum_free_adamw_makes_adamws_update_without_its_first_moment():
    torch.manual_seed(0)
    # the last one spans three of the step's chunks (the last one partial)
    ours = [
        torch.randn(7, 5, requires_grad=True),
        torch.randn(3, requires_grad=True),
        torch.randn(2 * CHUNK + 17, requires_grad=True),
    ]
    theirs = [p.detach().clone().requires_grad_(True) for p in ours]
    kwargs = {"lr": 1e-2, "eps": 1e-8, "weight_decay": 0.1}
    a = MomentumFreeAdamW(ours, beta2=0.99, **kwargs)
    b = torch.optim.AdamW(theirs, betas=(0.0, 0.99), foreach=False, **kwargs)
    for step in range(6):
        grads = [torch.randn_like(p) for p in ours]
        for opt, params in ((a, ours), (b, theirs)):
            for group in opt.param_groups:
                group["lr"] = 1e-2 * (step + 1) / 6  # a schedule changes lr between steps
            for p, g in zip(params, grads, strict=True):
                p.grad = None if (step == 3 and p.numel() == 3) else g.clone()  # one step without a gradient
            opt.step()
        for p, q in zip(ours, theirs, strict=True):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=f"step {step}")
    assert all(set(a.state[p]) == {"step", "exp_avg_sq"} for p in ours), "no first moment is kept"
    assert all("exp_avg" in b.state[q] for q in theirs), "test setup: AdamW keeps one"


def test_the_trainer_picks_it_when_beta1_is_zero():
    for betas, kind in (((0.0, 0.999), MomentumFreeAdamW), ((0.9, 0.999), torch.optim.AdamW)):
        cfg = TrainerConfig(model="tiny-qwen3", algorithm={"betas": betas})
        optimizer, _ = make_optimizer(build_policy(cfg).module, cfg.algorithm, cfg.steps)
        assert type(optimizer) is kind, (betas, type(optimizer))
