"""Training engines: `native` (PyTorch + Transformers, one machine) and `verl` (GPU clusters)."""
