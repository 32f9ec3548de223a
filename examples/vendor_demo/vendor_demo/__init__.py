"""vendor_demo: an engine vendor's own Torch kernels for a few speculative-decoding stages (an example)."""
