"""The trainer's Prometheus metrics, on a registry of their own (one per trainer), and the step record.

Owns the metric names (the Grafana "training" dashboard in deploy/grafana reads them) and the
mapping from a step's diagnostics (stable keys, see `STEP_KEYS`) to gauges; not the HTTP endpoint
(the service starts it) nor the diagnostics themselves (`clawgym.rl.losses`, `update.py`).
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# The per-step record (what `record_train_step` stores and Trainer.Status reports), by stable name:
# CleanRL's diagnostics plus ours (STYLE.md 7).
STEP_KEYS = (
    "loss", "policy_loss", "value_loss", "approx_kl", "clipfrac", "entropy", "explained_variance",
    "value_fit_loss", "value_warmup",
    "kl_ref", "grad_norm", "lr", "logprob_mismatch", "kl_engine_train", "off_policy_ratio_mean",
    "off_policy_ratio_max", "off_policy_masked_frac", "off_policy_masked_token_frac", "policy_lag",
    "policy_lag_max", "sharing_ratio", "tokens", "tokens_per_s", "step_s", "update_s", "rollout_wait_s",
    "rollout_wait_bound_s", "groups_owed", "groups_in_flight", "groups", "groups_filled", "groups_dropped",
    "stale_tokens_masked", "rollouts",
    "reward", "pass_rate", "version",
    "sft_tokens", "sft_epoch",  # SFT steps: the demonstrated tokens the NLL averages, epochs done
)  # fmt: skip


GAUGES = {  # step key → help; the gauge is clawgym_trainer_<key>
    "loss": "last step's total loss",
    "policy_loss": "last step's clipped PG loss",
    "value_loss": "last step's value loss (PPO)",
    "approx_kl": "last step's approx KL(π_old ‖ π_θ)",
    "kl_ref": "last step's k3 KL to the reference",
    "clipfrac": "last step's clipped-ratio fraction",
    "entropy": "last step's mean policy entropy",
    "explained_variance": "last step's explained variance of the values GAE used (1 - Var(R - V) / Var(R), PPO)",
    "value_fit_loss": "last step's value loss after the value head's own passes (value_epochs, in-sample)",
    "grad_norm": "last step's gradient norm before clipping",
    "lr": "last step's learning rate",
    "logprob_mismatch": "mean |train - engine| logprob of generated tokens",
    "off_policy_ratio_mean": "mean geometric-mean ratio π_old/π_engine per call (rollout), call_*/rollout_* only",
    "off_policy_ratio_max": "largest geometric-mean ratio π_old/π_engine of a call (rollout)",
    "off_policy_masked_frac": "fraction of calls (rollouts) masked for a ratio outside the band",
    "off_policy_masked_token_frac": "fraction of generated tokens masked with their call (rollout)",
    "sharing_ratio": "call tokens / tree tokens of the last batch",
    "tokens_per_s": "tree tokens trained per second",
    "step_s": "seconds of the last update + checkpoint",
    "rollout_wait_s": "seconds the last step waited for groups",
    "rollout_wait_bound_s": "of them, seconds it waited only for groups at their last step within max_policy_lag",
    "groups_in_flight": "groups started and not trained when the last step took its groups",
    "groups_filled": "groups the last step added while it waited at the staleness bound (max_groups_per_step), "
    "the awaited ones among them",
    "stale_tokens_masked": "generated tokens the last step left out of the loss, past max_policy_lag (stale_calls: mask)",
}


class TrainerMetrics:
    """Per-step gauges (loss, KL, entropy, clip fraction, grad norm, mismatch, sharing, tokens/s, …),
    reward and pass rate per harness, the policy-lag histogram, stale-group and token counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # One name per diagnostic from the loss to the dashboard: step key `k` is `clawgym_trainer_k`.
        self.gauges = {
            key: Gauge(f"clawgym_trainer_{key}", help_text, registry=r) for key, help_text in GAUGES.items()
        }
        self.step = Gauge(
            "clawgym_trainer_step", "optimizer steps committed (checkpoint registered)", registry=r
        )
        self.checkpoint_version = Gauge(
            "clawgym_trainer_checkpoint_version",
            "policy version of the newest registered checkpoint",
            registry=r,
        )
        self.reward = Gauge(
            "clawgym_trainer_reward", "mean rollout reward of the last step", ["harness"], registry=r
        )
        self.pass_rate = Gauge(
            "clawgym_trainer_pass_rate",
            "fraction of the last step's rollouts that passed",
            ["harness"],
            registry=r,
        )
        self.policy_lag = Histogram(
            "clawgym_trainer_policy_lag",
            "versions between the trainer and the oldest weights that generated a group, per group",
            buckets=(0, 1, 2, 3, 4, 6, 8, 16),
            registry=r,
        )
        self.stale_rollouts = Counter(
            "clawgym_trainer_stale_rollouts", "rollouts dropped as older than max_policy_lag", registry=r
        )
        self.dropped_groups = Counter(
            "clawgym_trainer_dropped_groups", "groups dropped as older than max_policy_lag", registry=r
        )
        self.trained_tokens = Counter("clawgym_trainer_trained_tokens", "tree tokens trained on", registry=r)
        self.trained_groups = Counter("clawgym_trainer_trained_groups", "groups trained on", registry=r)
        self.ready_replicas = Gauge(
            "clawgym_trainer_inference_ready_replicas",
            "inference replicas serving the last published version (taking traffic)",
            registry=r,
        )
        self.excluded_replicas = Gauge(
            "clawgym_trainer_inference_replicas_excluded",
            "times an inference replica was taken out of service (down, silent, or past the load deadline)",
            registry=r,
        )

    def observe_step(self, record: dict[str, float], by_harness: dict[str, dict[str, float]]) -> None:
        """Sets the gauges from one committed step's record (keys of `STEP_KEYS`)."""
        for key, gauge in self.gauges.items():
            if key in record:
                gauge.set(record[key])
        self.step.set(record["version"])
        self.checkpoint_version.set(record["version"])
        self.trained_tokens.inc(record.get("tokens", 0))
        self.trained_groups.inc(record.get("groups", 0))
        for harness, stats in by_harness.items():
            self.reward.labels(harness).set(stats["reward"])
            self.pass_rate.labels(harness).set(stats["pass_rate"])
