"""Utility measures of topic models and synthetic data with known topics (internal, not DP)."""
