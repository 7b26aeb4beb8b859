"""The base models a run can start from: the shelf of registered models and where their
weights come from (`base_models`), and the reader of the GGUF files the bundled models ship
as (`gemma3_gguf`)."""
