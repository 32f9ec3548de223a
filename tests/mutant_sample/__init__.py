"""A sample package for tests/test_mutants.py: libcst parses it, nothing launches its kernel."""
