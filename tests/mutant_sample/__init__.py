"""A sample package for tests/mutation/test_mutants.py: libcst parses it, nothing launches its kernel."""
