"""numba-compiled hot loops over flat arrays (set union policies, Gibbs samplers)."""
