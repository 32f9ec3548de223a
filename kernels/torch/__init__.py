"""Portable, vectorized Torch kernels (CPU and CUDA), one module per family."""
