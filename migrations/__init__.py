"""Alembic migrations of the studio database (SQLite and PostgreSQL)."""
