"""Use cases of the studio: the REST routes, the UI and the CLI all call these."""
