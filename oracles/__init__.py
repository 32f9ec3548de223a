"""Loop-level NumPy oracles, one module per stage family: the contracts of STAGES.md in code."""
