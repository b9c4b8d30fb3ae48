"""The RL trainer: the loop over rollout groups, checkpoints the engines hot-reload, resume, FSDP2."""
