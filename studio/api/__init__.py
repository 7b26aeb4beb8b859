"""The REST API (FastAPI), mounted under /api/v1; routes stay thin over studio.services."""
