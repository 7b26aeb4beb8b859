"""The test suite (a regular package, so that no installed top-level `tests` package, as veRL's
wheel ships one, can shadow it where the repository root is on the path)."""
