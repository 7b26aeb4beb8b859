"""Files the browser uploads to the UI (Gradio's upload route) before a page stores them:
bounded by the studio's upload limit, kept in the data dir, and swept (D7)."""

from __future__ import annotations

import os
import time

from fastapi.testclient import TestClient

from frontend.pages import data
from frontend.server import create_app
from studio.services import qa_sets
from studio.services.uploads import (
    UI_UPLOAD_MAX_AGE_S,
    UI_UPLOADER_MARK,
    remove_stale_staging,
    ui_upload_folder,
)
from studio.storage.tables import Role
from tests.support.actors import PASSWORD, user
from tests.support.web_sign_in import post_sign_in


def test_ui_uploads_are_bounded_kept_in_the_data_dir_and_swept(settings):
    """Any signed-in user could upload files of any size to Gradio's folder in the machine's
    temporary folder, and nothing removed them."""
    user(settings, "ana")
    small = settings.model_copy(update={"max_upload_bytes": 1000})
    folder = ui_upload_folder(small)
    with TestClient(create_app(small), follow_redirects=False) as client:
        assert client.post("/gradio_api/upload", files={"files": ("a.txt", b"a")}
                           ).status_code == 401, "signed-in users only"
        assert post_sign_in(client, "ana", PASSWORD).status_code == 303
        too_big = client.post("/gradio_api/upload", files={"files": ("big.txt", b"a" * 2000)})
        assert too_big.status_code == 413 and "1000 bytes" in too_big.text
        kept = client.post("/gradio_api/upload", files={"files": ("c.jsonl", b"x" * 500)})
        assert kept.status_code == 200, kept.text
        [path] = [os.path.realpath(p) for p in kept.json()]
        assert path.startswith(os.path.realpath(folder) + os.sep)
        assert _files(folder) == ["c.jsonl"], "nothing of the refused file"

        fresh = folder / "fresh" / "d.jsonl"
        fresh.parent.mkdir()
        fresh.write_text("{}")
        old = time.time() - UI_UPLOAD_MAX_AGE_S - 60
        os.utime(path, (old, old))
        assert [os.path.realpath(p) for p in remove_stale_staging(small)] == [path]
        assert _files(folder) == ["d.jsonl"]
    assert _files(folder) == ["d.jsonl"], "the web app removes its own uploads when it stops"


def test_a_ui_upload_is_read_by_its_uploader_and_admins_only(settings):
    """Any signed-in user could read another user's UI upload through Gradio's file route,
    or hand its path to a page in an event (N9)."""
    user(settings, "ana"), user(settings, "root", Role.admin)
    bob = user(settings, "bob")
    with TestClient(create_app(settings), follow_redirects=False) as client:
        def signed_in_as(name):
            client.cookies.clear()
            assert post_sign_in(client, name, PASSWORD).status_code == 303

        signed_in_as("ana")
        [path] = client.post("/gradio_api/upload", files={"files": (
            "qa.csv", b"question,answer\nWho?,Ada\n")}).json()
        assert client.get(f"/gradio_api/file={path}").content.startswith(b"question")
        signed_in_as("bob")
        refused = client.get(f"/gradio_api/file={path}")
        assert refused.status_code == 403, refused.text
        assert refused.json()["detail"] == ("bob may not read this file: another user "
                                            "uploaded it; only its uploader or an admin may")
        assert client.head(f"/gradio_api/file={path}").status_code == 403
        stored = data.upload_qa(settings, bob, path, "taken", "train", "auto")
        assert "bob may not read this file" in stored and qa_sets.list_qa_sets(settings) == []
        signed_in_as("root")
        assert client.get(f"/gradio_api/file={path}").status_code == 200, "an admin may"
        signed_in_as("bob")
        [same] = client.post("/gradio_api/upload", files={"files": (
            "mine.csv", b"question,answer\nWho?,Ada\n")}).json()
        assert client.get(f"/gradio_api/file={same}").status_code == 200, "bob's own"
        assert client.get(f"/gradio_api/file={path}").status_code == 200, \
            "the same content, uploaded by bob too"


def _files(folder):
    """The uploaded files in `folder` (not the marks of who uploaded them)."""
    return sorted(p.name for p in folder.rglob("*")
                  if p.is_file() and not p.name.startswith(UI_UPLOADER_MARK))
