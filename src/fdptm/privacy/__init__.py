"""Privacy accounting: adjacency notions, conversions, composition, budget plans, noise."""
