"""One module per page of the studio, each exposing `build(settings)`."""
