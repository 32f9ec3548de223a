"""Triton kernels (CUDA; CPU through the Triton interpreter), one module per family."""
