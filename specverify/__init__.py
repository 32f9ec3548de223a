"""specverify: byte-exact differential testing of the kernels around speculative decoding."""
__version__ = "0.1.0"
