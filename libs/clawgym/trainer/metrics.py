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
    "kl_ref", "grad_norm", "lr", "logprob_mismatch", "kl_engine_train", "policy_lag", "sharing_ratio",
    "tokens", "tokens_per_s", "step_s", "rollout_wait_s", "groups", "groups_dropped", "rollouts",
    "reward", "pass_rate", "version",
)  # fmt: skip


class TrainerMetrics:
    """Per-step gauges (loss, KL, entropy, clip fraction, grad norm, mismatch, sharing, tokens/s, …),
    reward and pass rate per harness, the policy-lag histogram, stale-group and token counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # step key → gauge; literal names so the dashboards' checks (tests/deploy) can find them
        self.gauges = {
            "loss": Gauge("clawgym_trainer_loss", "last step's total loss", registry=r),
            "policy_loss": Gauge("clawgym_trainer_policy_loss", "last step's clipped PG loss", registry=r),
            "value_loss": Gauge("clawgym_trainer_value_loss", "last step's value loss (PPO)", registry=r),
            "approx_kl": Gauge("clawgym_trainer_kl", "last step's approx KL(π_old ‖ π_θ)", registry=r),
            "kl_ref": Gauge("clawgym_trainer_kl_ref", "last step's k3 KL to the reference", registry=r),
            "clipfrac": Gauge(
                "clawgym_trainer_clip_fraction", "last step's clipped-ratio fraction", registry=r
            ),
            "entropy": Gauge("clawgym_trainer_entropy", "last step's mean policy entropy", registry=r),
            "explained_variance": Gauge(
                "clawgym_trainer_explained_variance", "last step's value explained variance", registry=r
            ),
            "grad_norm": Gauge(
                "clawgym_trainer_grad_norm", "last step's gradient norm before clipping", registry=r
            ),
            "lr": Gauge("clawgym_trainer_learning_rate", "last step's learning rate", registry=r),
            "logprob_mismatch": Gauge(
                "clawgym_trainer_logprob_mismatch",
                "mean |train - engine| logprob of generated tokens",
                registry=r,
            ),
            "sharing_ratio": Gauge(
                "clawgym_trainer_sharing_ratio", "call tokens / tree tokens of the last batch", registry=r
            ),
            "tokens_per_s": Gauge(
                "clawgym_trainer_tokens_per_second", "tree tokens trained per second", registry=r
            ),
            "step_s": Gauge(
                "clawgym_trainer_step_seconds", "seconds of the last update + checkpoint", registry=r
            ),
            "rollout_wait_s": Gauge(
                "clawgym_trainer_rollout_wait_seconds", "seconds the last step waited for groups", registry=r
            ),
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
        self.trained_tokens = Counter("clawgym_trainer_trained_tokens", "tree tokens trained on", registry=r)
        self.trained_groups = Counter("clawgym_trainer_trained_groups", "groups trained on", registry=r)

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
