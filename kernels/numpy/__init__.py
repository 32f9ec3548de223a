"""Host production code: the NumPy backend of host stages."""
