"""A logged-in client of one studio's REST API (FastAPI's TestClient), for the API tests."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from studio.services.access import Actor
from studio.services.auth import issue_token
from studio.settings import Settings
from tests.support.actors import admin


class Api:
    """A logged-in client of one studio, plus its settings."""

    def __init__(self, settings: Settings, client: TestClient, token: str):
        self.settings, self.client = settings, client
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str, **kw):
        return self.client.get(f"/api/v1{path}", headers=self.headers, **kw)

    def post(self, path: str, **kw):
        return self.client.post(f"/api/v1{path}", headers=self.headers, **kw)

    def put(self, path: str, **kw):
        return self.client.put(f"/api/v1{path}", headers=self.headers, **kw)

    def delete(self, path: str):
        return self.client.delete(f"/api/v1{path}", headers=self.headers)

    def upload(self, path: str, name: str, filename: str, content: bytes, **form):
        return self.post(path, files={"file": (filename, content)}, data={"name": name, **form})

    def stored_uploads(self) -> list[Path]:
        folder = self.settings.resolved_data_dir / "uploads"
        return sorted(folder.iterdir()) if folder.exists() else []


def bearer(settings: Settings, actor: Actor) -> dict:
    """A bearer header acting as `actor` (a new token)."""
    return {"Authorization": f"Bearer {issue_token(settings, actor, 'tests')['token']}"}


def admin_headers(settings: Settings) -> dict:
    """A bearer header for the studio's admin (created once per data directory)."""
    path = settings.resolved_data_dir / "api-token.txt"
    if not path.exists():
        path.write_text(bearer(settings, admin(settings))["Authorization"])
    return {"Authorization": path.read_text()}
