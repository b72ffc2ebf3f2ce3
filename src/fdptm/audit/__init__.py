"""Privacy and utility audits of releases (internal, not DP)."""
