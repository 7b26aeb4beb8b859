"""The index build runs as a worker task: upload, watch the progress, search."""

from __future__ import annotations

import json

import pytest

from tests.support.processes import running_worker, wait_for
from tests.support.shared_data import HOTPOT, needs_shared


@pytest.mark.slow
@needs_shared
def test_worker_indexes_an_uploaded_corpus(api, tmp_path):  # noqa: F811
    with running_worker(api.settings.resolved_data_dir, tmp_path / "worker.log"):
        corpus = api.upload("/corpora", "hotpot", "corpus.jsonl",
                            (HOTPOT / "corpus.jsonl").read_bytes()).json()
        seen = []

        def ready():
            state = api.get(f"/corpora/{corpus['id']}").json()
            seen.append(state["status"])
            return state if state["status"] in ("ready", "failed") else None

        final = wait_for(ready, 120, "the index build")
    assert final["status"] == "ready", final["error"]
    assert final["progress"] == {"rows_read": 1000, "passages_indexed": final["num_passages"],
                                 "fraction": 1.0}
    assert seen[0] in ("pending", "indexing")
    passage = json.loads((HOTPOT / "corpus.jsonl").read_text().splitlines()[10])
    query = " ".join(passage["text"].split()[:12])
    hits = api.get(f"/corpora/{corpus['id']}/search", params={"q": query, "k": 3}).json()
    assert passage["title"] in [h["title"] for h in hits["hits"]]
