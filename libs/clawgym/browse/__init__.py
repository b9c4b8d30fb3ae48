"""The rollout browser's reads and page: runs → steps, groups, rollouts → one rollout's prefix tree."""
