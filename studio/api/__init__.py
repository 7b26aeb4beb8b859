"""The REST API (FastAPI), mounted under `studio.api_paths.API_PREFIX`; routes stay thin over
studio.services."""
