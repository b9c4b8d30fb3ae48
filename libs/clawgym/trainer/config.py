"""The `trainer` config section: the run (policy, algorithm, batch shape, harness mix) and the service.

Owns the fields, their defaults and the checks that fail a bad config at start with the field's
name (`trainer.harnesses.0.name: unknown harness …`); not how they are used (`loop.py`). Env
variables map in as `CLAWGYM_TRAINER__CHECKPOINT_URI=/data/checkpoints`, nested sections as
`CLAWGYM_TRAINER__ALGORITHM__LR=1e-6`.

A batch is `groups_per_step` groups of `group_size` samples each; each group is one task through one
harness, the harness drawn from `harnesses` by weight. Version v of the policy is the weights after
v optimizer steps; the checkpoint of step v is version v.
"""

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from clawgym.errors import InvalidArgument
from clawgym.section import Section

if TYPE_CHECKING:
    from clawgym.rl.losses import LossConfig


class HarnessWeight(Section):
    """One harness of the mix: GRPO groups are per (task, harness)."""

    name: str = Field(
        description="harness adapter name (clawgym.harnesses.registry), e.g. reference, claude-code"
    )
    weight: float = Field(1.0, gt=0, description="relative share of the batch's groups that use this harness")

    @field_validator("name")
    @classmethod
    def _known_harness(cls, name: str) -> str:
        from clawgym.harnesses.registry import ALIASES, HARNESSES  # lazy: the registry imports adapters

        if ALIASES.get(name, name) not in HARNESSES:
            raise ValueError(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")
        return ALIASES.get(name, name)


class AlgorithmConfig(Section):
    """The RL algorithm and its optimiser: GRPO (group-normalised rewards) or PPO (value head + GAE)."""

    name: Literal["grpo", "ppo", "sft"] = Field(
        "grpo",
        description="grpo: group-normalised rewards; ppo: value head + GAE; sft: every step is supervised, the "
        "NLL of the demonstrations in trainer.sft (no rollouts are trained)",
    )
    # --- optimiser ---
    lr: float = Field(1e-5, gt=0, description="AdamW peak learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay")
    betas: tuple[float, float] = Field(
        (0.9, 0.999), description="AdamW (β1, β2); with β1 = 0 no first moment is kept (the same update)"
    )
    adam_eps: float = Field(1e-8, gt=0, description="AdamW ε")
    max_grad_norm: float = Field(1.0, gt=0, description="clip the global gradient norm to this")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="learning-rate decay after warmup, over `trainer.steps`"
    )
    warmup_steps: int = Field(0, ge=0, description="steps of linear warmup from 0 to `lr`")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="linear/cosine decay ends at lr × this")
    epochs: int = Field(
        1, ge=1, description="optimizer steps per batch (>1: PPO's reuse, ratios against the first pass)"
    )
    # --- loss (clawgym.rl.losses.LossConfig) ---
    temperature: float = Field(
        1.0,
        gt=0,
        description="T of softmax(logits / T) for calls recorded without their sampling temperature (each "
        "call's own is used where recorded); ClawgymConfig copies proxy.temperature here when this is not set",
    )
    clip_low: float = Field(0.2, ge=0, description="ε_low: the ratio is clipped below at 1 - ε_low")
    clip_high: float = Field(0.28, ge=0, description="ε_high: the ratio is clipped above at 1 + ε_high")
    tis_cap: float | None = Field(
        2.0,
        gt=0,
        description="C: cap of the importance weight against the engine's logprobs, per token (token_tis, "
        "*_geo_mask) or per call/rollout (*_geo_tis); null = uncapped, and no correction at all with token_tis",
    )
    off_policy: Literal[
        "token_tis", "call_geo_tis", "rollout_geo_tis", "call_geo_mask", "rollout_geo_mask"
    ] = Field(
        "token_tis",
        description="correction for tokens sampled by other weights than π_old (engine mismatch, older "
        "versions): token_tis: each token by min(π_old/π_engine, tis_cap); call_geo_tis / rollout_geo_tis: "
        "each call's (rollout's) tokens by min(ρ, tis_cap), ρ the geometric mean of π_old/π_engine over "
        "its generated tokens; call_geo_mask / rollout_geo_mask: token_tis, and a call (rollout) whose ρ "
        "is outside [geo_mask_low, geo_mask_high] trains nothing; call_*/rollout_* cost one no-grad "
        "forward more per step when epochs is 1",
    )
    geo_mask_low: float = Field(
        0.99,
        gt=0,
        le=1,
        description="*_geo_mask: a call (rollout) whose geometric-mean ratio is below this is masked",
    )
    geo_mask_high: float = Field(
        1.01,
        ge=1,
        description="*_geo_mask: a call (rollout) whose geometric-mean ratio is above this is masked (verl "
        "suggests 1.0002-1.001 against engine mismatch alone; policy lag moves it further)",
    )
    kl_coef: float = Field(
        0.0, ge=0, description="β: weight of the k3 KL to the initial policy (0 = no reference)"
    )
    kl_cap: float | None = Field(
        10.0,
        gt=0,
        description="each token's k3 KL estimate is capped at this (as verl's low_var_kl): a token the policy "
        "finds far less likely than the reference would otherwise make a step's whole gradient; null = uncapped",
    )
    kl_diagnostic: bool = Field(
        False,
        description="measure kl_ref (the k3 KL to the initial policy) even when kl_coef is 0, as a diagnostic "
        "only: keeps a frozen copy of the initial policy and costs one no-grad forward of it per step",
    )
    entropy_coef: float = Field(0.0, ge=0, description="entropy bonus coefficient")
    value_coef: float = Field(0.5, ge=0, description="PPO: weight of the value loss")
    value_clip: float | None = Field(0.2, gt=0, description="PPO: clip the value change; null = plain MSE")
    value_lr: float | None = Field(None, gt=0, description="PPO: learning rate of the value head; null = lr")
    value_epochs: int = Field(
        0,
        ge=0,
        description="PPO: after each step's update, this many more optimizer steps of the value head alone on "
        "the batch's value targets, over the hidden states the update's first forward computed (the weights "
        "before it; kept for the step: value rows × hidden size floats), so a pass costs no forward. Measured "
        "on the quickstart's PPO (24 steps, bench/algorithms.py): 8 passes did not raise the explained variance",
    )
    value_warmup_steps: int = Field(
        0,
        ge=0,
        description="PPO: the first N RL steps fit only the value head (max(value_epochs, 1) passes on the batch, "
        "after one no-grad forward of it), the policy frozen: each consumes its groups and saves the next "
        "version as any step does, with the policy's weights unchanged; the lr schedule counts them",
    )
    aggregation: Literal["token", "sequence", "sum"] = Field(
        "token", description="loss normalisation over the whole batch: per token, per rollout, or a plain sum"
    )
    scale_by_std: bool = Field(True, description="GRPO: divide by the group's reward std (false: Dr. GRPO)")
    leave_one_out: bool = Field(False, description="GRPO: baseline = mean of the other samples (RLOO)")
    gamma: float = Field(1.0, ge=0, le=1, description="PPO: discount over generated tokens")
    lam: float = Field(
        1.0,
        ge=0,
        le=1,
        description="PPO: GAE λ. 1: each token's advantage is the outcome's return minus V, whatever its distance "
        "from the end (at 0.95 with V still near 0, the first of 64 generated tokens got 0.95^63 ≈ 4% of the reward)",
    )
    whiten_advantages: bool = Field(
        True,
        description="PPO: shift and scale the batch's advantages (every rank's rows) to weighted mean 0 and std 1, "
        "as GRPO's group normalisation scales its own; the value targets stay unwhitened",
    )

    @property
    def needs_reference(self) -> bool:
        """A frozen copy of the initial policy is kept: for the KL term, or to measure the KL only."""
        return self.kl_coef > 0 or self.kl_diagnostic

    def loss_config(self) -> "LossConfig":
        """The loss coefficients for `clawgym.rl.losses` (imported here: it needs torch, this module not)."""
        from clawgym.rl.losses import LossConfig

        fields = ("clip_low", "clip_high", "tis_cap", "off_policy", "geo_mask_low", "geo_mask_high", "kl_coef",
                  "kl_cap", "entropy_coef", "value_coef", "value_clip", "temperature")  # fmt: skip
        return LossConfig(**{f: getattr(self, f) for f in fields})


ALL_LINEAR = "all-linear"  # LoraSettings.target_modules: every linear layer but the LM head


class LoraSettings(Section):
    """Low-rank adapters (peft) instead of full fine-tuning; checkpoints hold the merged weights."""

    enabled: bool = Field(False, description="train LoRA adapters only")
    r: int = Field(16, ge=1, description="adapter rank")
    alpha: int = Field(32, ge=1, description="adapter scaling numerator (scale = alpha / r)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter input")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description=f"module names (suffixes) that get adapters; [{ALL_LINEAR}]: every linear layer of the "
        "decoder (attention and MLP, not the LM head)",
    )


class FsdpSettings(Section):
    """How FSDP2 shards the policy over data-parallel ranks (`torchrun` with more than one rank): the
    knobs for a policy whose training state does not fit one GPU."""

    reshard_after_forward: bool = Field(
        True,
        description="free each layer's gathered parameters after its forward and gather them again for the "
        "backward (least memory); false keeps them until the backward (one all-gather less per layer)",
    )
    param_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="dtype layers compute in; auto = trainer.dtype. bfloat16 with trainer.dtype float32 is "
        "mixed precision: float32 master weights and optimizer state, bfloat16 forward and backward",
    )
    reduce_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="dtype gradients are reduced across ranks in; auto = float32"
    )
    cpu_offload: bool = Field(
        False,
        description="keep sharded parameters, gradients and optimizer state in host memory between uses and "
        "step the optimizer on the CPU (GPU memory for the largest policies, at the cost of speed)",
    )


class SftConfig(Section):
    """Supervised steps on demonstrations (`trainer/sft.py`): the NLL of the generated tokens of chosen
    rollouts, tree-packed. Every step with algorithm.name sft; the first `steps` steps of a GRPO or
    PPO run (a warm start), the rest RL."""

    source: str = Field(
        "",
        description="where the demonstrations are: a run folder (its store), an export folder "
        "(`clawgym export`: JSONL, Parquet or HF), or empty: this run's own store (name sft.run_id)",
    )
    run_id: str = Field(
        "",
        description="the store run whose rollouts are the demonstrations; empty = the source's newest "
        "training run (an export folder holds one run)",
    )
    min_reward: float | None = Field(
        None,
        description="keep only rollouts whose reward is at least this (rejection sampling, expert "
        "iteration); null = every rollout with a call that did not fail, rewarded or not",
    )
    teacher_only: bool = Field(
        False,
        description="train only on the tokens of calls marked as a teacher's (`teacher` in the recorded "
        "response's `_clawgym` section); the other calls are dropped, their tokens stay context where a "
        "later call's prompt repeats them",
    )
    harnesses: list[str] = Field(
        default_factory=list,
        description="keep only rollouts through these harnesses (a source captured through several, "
        "for a warm start in one of them); empty = every harness",
    )
    steps: int = Field(
        0,
        ge=0,
        description="with algorithm grpo or ppo: the run's first N steps are SFT steps (versions 1..N, a "
        "warm start), then RL up to trainer.steps; 0 = none. With algorithm sft every step is one",
    )
    groups_per_step: int = Field(
        4,
        ge=1,
        description="demonstration groups per SFT step, in an order reshuffled each epoch (seeded by "
        "trainer.seed); all of them when fewer. A step merges them into one prefix tree per rank",
    )
    lr: float | None = Field(
        None,
        gt=0,
        description="learning rate of the SFT steps, constant; null = algorithm.lr with its schedule. A "
        "warm start before RL usually wants a larger one than the RL steps",
    )


class SamplingConfig(Section):
    """Which tasks a batch rolls out (`curriculum.py`): uniformly, or by each family's expected signal."""

    mode: Literal["uniform", "signal"] = Field(
        "uniform",
        description="uniform: every task alike; signal: a task family (its metadata's `family`) by the chance "
        "that a group of it has rewards that differ, from its recent pass rate, then a task of it uniformly",
    )
    half_life_steps: float = Field(
        8.0, gt=0, description="signal: a family's pass/fail evidence halves in weight after this many steps"
    )
    min_weight: float = Field(
        0.05, gt=0, le=1, description="signal: the least weight of a family, so that none stops being tried"
    )


class TrainerConfig(Section):
    """What `clawgym serve trainer` (and the embedded runtime's trainer) runs."""

    # --- the service ---
    host: str = Field(
        "127.0.0.1",
        description="address `clawgym serve trainer` and its /metrics listen on; deployments: 0.0.0.0",
    )
    port: int = Field(50054, ge=0, description="gRPC port of Trainer.Status (0 = any free port)")
    metrics_port: int = Field(9104, ge=0, description="Prometheus /metrics HTTP port; 0 = none")
    # --- the run ---
    run_name: str = Field("clawgym", min_length=1, description="run name; its checkpoints live under it")
    run_id: str = Field(
        "",
        description="store run id to continue; empty = the run recorded under checkpoint_uri/run_name, or a new one",
    )
    run_dir: str = Field(
        "",
        description="the run's folder (report, summary, TensorBoard events); `serve trainer`: empty = the "
        "run's checkpoint folder <checkpoint_uri>/<run_name> when local, else runs/<run_name>; "
        "`clawgym train`: its --run-dir, else runs/<timestamp>",
    )
    model: str = Field(
        "",
        description="policy model spec the trainer loads: tiny-qwen3, smollm2-135m or a local HF folder "
        "(required); the engine serves inference.model, which a run sets to this (a deployment may name "
        "the same policy by the engine's own path)",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="dtype of the trained parameters (the engine serves at inference.dtype, which may differ: "
        "float32 training, bfloat16 serving); built-in policies are cached in inference.cache_dir",
    )
    autocast: Literal["off", "bfloat16"] = Field(
        "off",
        description="bfloat16: the policy's forwards and backwards compute matrix products in bfloat16 "
        "(torch.autocast; logits upcast before softmax) while parameters, gradients and optimizer state "
        "stay trainer.dtype: one process's mixed precision (FSDP ranks: trainer.fsdp.param_dtype). Faster "
        "where the device computes bfloat16 natively (CPUs with AVX512-BF16 or AMX, GPUs)",
    )
    algorithm: AlgorithmConfig = Field(
        default_factory=AlgorithmConfig, description="RL algorithm and optimiser"
    )
    lora: LoraSettings = Field(
        default_factory=LoraSettings, description="LoRA adapters (peft) instead of full weights"
    )
    fsdp: FsdpSettings = Field(
        default_factory=FsdpSettings, description="FSDP2 sharding over several ranks (torchrun)"
    )
    activation_checkpointing: bool = Field(
        False,
        description="recompute each decoder layer's activations in the backward instead of keeping them: "
        "activation memory of about one layer instead of all, for one more forward's compute",
    )
    trained_layers: int = Field(
        0,
        ge=0,
        description="train only the top N decoder layers (and the final norm; with lora.enabled, their "
        "adapters): the embeddings, the LM head and the layers below stay frozen, and the backward stops "
        "at the lowest trained layer. 0 = every layer",
    )
    heap_mmap_threshold_mb: float = Field(
        0.0,
        ge=0,
        description="glibc: blocks from this size up get their own mapping, handed back to the OS when "
        "freed (trainer.memory.unpool_large_blocks, the trainer's whole process: an embedded run's engine "
        "too); 0 = glibc's own threshold, which grows to 32 MB and keeps freed blocks resident. 1 MB cut "
        "a CPU update's peak by ~0.9 GB for ~1.3x its time (bench/update_memory.py)",
    )
    seed: int = Field(0, ge=0, description="seed of task sampling, adapters and the value head")
    # --- batches ---
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: rollouts then update, alternately; async: rollouts keep running across updates "
        "(each call records the version that served it) and the groups started but not yet trained are kept "
        "at (max_policy_lag + 1) × groups_per_step; a step trains the first complete groups, oldest first",
    )
    steps: int = Field(100, ge=1, description="optimizer steps of the run (the run ends at version = steps)")
    after_run: Literal["exit", "serve"] = Field(
        "exit",
        description="what `clawgym serve trainer` does once the run is finished: exit (compose, a "
        "Job), or keep answering Status until stopped (a StatefulSet pod, which restarts what exits)",
    )
    group_size: int = Field(4, ge=1, description="G: samples per (task, harness) group")
    groups_per_step: int = Field(4, ge=1, description="groups per optimizer step (the batch size)")
    max_groups_per_step: int = Field(
        0,
        ge=0,
        description="a step that must wait for a group at its last step within max_policy_lag trains the "
        "complete groups within the bound meanwhile (oldest first, its gradient accumulated before the "
        "optimizer steps), up to this many groups in the step; 0 = groups_per_step: it waits idle. Not with "
        "PPO's whiten_advantages (whitening needs the whole batch first)",
    )
    harnesses: list[HarnessWeight] = Field(
        default_factory=lambda: [HarnessWeight(name="reference")],
        min_length=1,
        description="the weighted harness mix",
    )
    suite: str = Field("mini", description="task suite (name or folder) the orchestrator runs tasks from")
    tasks: list[str] = Field(
        default_factory=list,
        description="task ids to sample from; empty = every task the rollout source lists",
    )
    sft: SftConfig = Field(
        default_factory=SftConfig,
        description="demonstrations for supervised steps: algorithm sft, or a warm start before RL",
    )
    sampling: SamplingConfig = Field(
        default_factory=SamplingConfig,
        description="how a batch's tasks are drawn (uniform or by expected signal)",
    )
    max_policy_lag: int = Field(
        1,
        ge=0,
        description="staleness bound: the most versions a group's oldest generated token may lag the version "
        "being trained; an older group is dropped (counted: groups_dropped). async: also how many steps "
        "ahead rollouts are requested, and a step waits for a group still rolling out whose oldest recorded "
        "call is this many versions old (its last step within the bound), so the run's own groups are not "
        "dropped (stale_calls: wait; mask trains it later without its stale tokens)",
    )
    stale_calls: Literal["wait", "mask"] = Field(
        "wait",
        description="async, a group still rolling out whose oldest call reaches max_policy_lag: wait (the step "
        "at its last version within the bound waits for it, training complete groups meanwhile up to "
        "max_groups_per_step) or mask (no step waits for it: once complete it is trained with the tokens older "
        "than the bound left out of the loss, still in the tree as context and in the normaliser, counted as "
        "stale_tokens_masked; a group with no token within the bound is dropped)",
    )
    failed_reward: float = Field(
        0.0,
        description="reward of a rollout that ended without one (cancelled); failed rollouts (infrastructure "
        "failures) are never trained",
    )
    micro_batch_tokens: int = Field(
        8192, ge=16, description="token budget of one packed micro-batch (gradient accumulation splits trees)"
    )
    merge_group_trees: bool = Field(
        True,
        description="a rank trains its groups of a step as one prefix tree: what the groups share (a "
        "harness's system prompt and tools) is computed once a step instead of once a group, with the same "
        "gradient; false: one tree per group",
    )
    rollout_source: Literal["orchestrator", "toy"] = Field(
        "orchestrator",
        description="orchestrator: the orchestrator service runs tasks through harnesses; "
        "toy: an in-process engine generates toy-task rollouts (tests, demos; training.toy)",
    )
    rollout_timeout_s: float = Field(
        1800.0, gt=0, description="give up a step when no group completes for this long"
    )
    sweep_interval_s: float = Field(
        30.0, gt=0, description="how often the store is swept for complete groups whose announcement was lost"
    )
    # --- checkpoints ---
    checkpoint_uri: str = Field(
        "./checkpoints",
        description="local folder or fsspec URI; checkpoints go to <uri>/<run_name>/v<version>",
    )
    keep_checkpoints: int = Field(3, ge=1, description="keep the newest N checkpoint folders")
    keep_every: int = Field(
        0,
        ge=0,
        description="also keep every version divisible by N (0 = only the newest keep_checkpoints), "
        "e.g. to evaluate them later (`clawgym eval --checkpoint V`)",
    )
    lean_kept_checkpoints: bool = Field(
        True,
        description="rewrite a folder kept only by keep_every lean once it is no longer one of the newest "
        "keep_checkpoints: bfloat16 weights, no optimizer state (half the disk; it serves `clawgym eval "
        "--checkpoint V` and export at bfloat16 precision, not a resume); local folders only",
    )
    save_optimizer_state: bool = Field(
        True,
        description="write the optimizer's moments into each checkpoint (2x the weights: a SmolLM2 checkpoint "
        "took 2.7-4.9 s with them, 1.3-1.5 s without, on 2 CPU cores); without them a resumed run restarts them",
    )

    @model_validator(mode="after")
    def _lora_needs_full_shape(self) -> "TrainerConfig":
        if self.algorithm.needs_reference and self.lora.enabled:
            # The reference is the frozen base, which LoRA keeps anyway; supporting it is issue work.
            raise ValueError("algorithm.kl_coef > 0 or kl_diagnostic with lora.enabled is not supported yet")
        return self

    @model_validator(mode="after")
    def _fill_fits_the_step(self) -> "TrainerConfig":
        if not self.max_groups_per_step:
            return self
        if self.max_groups_per_step < self.groups_per_step:
            raise ValueError(
                f"max_groups_per_step: {self.max_groups_per_step} is below groups_per_step "
                f"({self.groups_per_step}); 0 turns it off"
            )
        algo = self.algorithm
        if self.max_groups_per_step > self.groups_per_step and algo.name == "ppo" and algo.whiten_advantages:
            raise ValueError(
                "max_groups_per_step: PPO's whiten_advantages needs the whole batch before the first "
                "backward; set algorithm.whiten_advantages false or leave max_groups_per_step 0"
            )
        return self

    @model_validator(mode="after")
    def _sft_has_demonstrations(self) -> "TrainerConfig":
        sft, name = self.sft, self.algorithm.name
        if name == "sft" and sft.steps:
            raise ValueError("sft.steps: with algorithm.name sft every step is an SFT step; leave it 0")
        if name != "sft" and sft.steps >= self.steps:
            raise ValueError(
                f"sft.steps: {sft.steps} warm-start steps leave no RL step of trainer.steps ({self.steps}); "
                "trainer.steps counts both stages (or use algorithm.name sft)"
            )
        if (name == "sft" or sft.steps) and not (sft.source or sft.run_id):
            raise ValueError("sft.source: name the demonstrations (a run or export folder) or sft.run_id")
        return self

    def is_sft_step(self, version: int) -> bool:
        """Whether the step that makes version + 1 is supervised."""
        return self.algorithm.name == "sft" or version < self.sft.steps


def check_trainer_config(cfg: TrainerConfig) -> None:
    """What a trainer needs beyond a well-formed section; InvalidArgument names the field."""
    if not cfg.model:
        raise InvalidArgument(
            "trainer.model: missing; name the policy (tiny-qwen3, smollm2-135m or a local HF folder)"
        )
    from clawgym.policies import policy_spec

    try:
        policy_spec(cfg.model)
    except InvalidArgument as e:
        raise InvalidArgument(f"trainer.model: {e}") from None
