"""The native engine: multi-turn tool rollouts and loss-masked GRPO with PyTorch + Transformers."""
