"""The REST API (FastAPI), mounted under /api/v1; routes stay thin over studio.services."""

#: Where every route of the API is mounted (the veRL launcher builds its retrieve URL from it).
API_PREFIX = "/api/v1"
