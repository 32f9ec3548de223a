"""Production implementations: `torch/<family>.py` (portable) and `triton/<family>.py` (GPU)."""
