"""Files the browser uploads to the UI (Gradio's upload route) before a page stores them:
bounded by the studio's upload limit, kept in the data dir, and swept (D7)."""

from __future__ import annotations

import os
import time

from fastapi.testclient import TestClient

from frontend.server import create_app
from studio.services.uploads import UI_UPLOAD_MAX_AGE_S, remove_stale_staging, ui_upload_folder
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


def _files(folder):
    return sorted(p.name for p in folder.rglob("*") if p.is_file())
