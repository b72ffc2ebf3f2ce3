"""DP mechanisms: vocabulary selection (M1) and topic models (M2)."""
