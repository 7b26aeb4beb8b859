"""ICRL Studio: teach an LLM to use a tool with in-context reinforcement learning."""
