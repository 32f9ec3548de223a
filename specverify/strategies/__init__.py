"""Hypothesis strategies: shared building blocks (`blocks`) and one module per stage family."""
