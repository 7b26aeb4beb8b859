"""Where the REST API's routes live, for the processes that call the studio from outside its
web app (the veRL workers' retrieval) as well as for the app that mounts them: one place,
so that neither imports the other."""

API_PREFIX = "/api/v1"


def retrieve_path(corpus_id: int) -> str:
    """The search endpoint of a corpus (Search-R1's request and answer)."""
    return f"{API_PREFIX}/corpora/{corpus_id}/retrieve"
