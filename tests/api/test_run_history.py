"""What a run wrote, read back through the API on SQLite and PostgreSQL: metric and rollout
pages with filters, a rollout's segments, runs compared, and the run's YAML."""

from __future__ import annotations

import random

import pytest
import yaml
from fastapi.testclient import TestClient

from studio.api.app import create_api
from studio.method.exemplars import Exemplar
from studio.method.token_arrays import TokenArrays
from studio.run_config import parse_run_config
from studio.services import auth, run_history
from studio.services.run_plans import DataRef, RunPlan
from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import Rollout, Run, RunEvent, RunMetric


@pytest.fixture
def api(migrated_db_url, tmp_path):
    settings = Settings(data_dir=tmp_path / "data", database_url=migrated_db_url)
    with db.session_scope(migrated_db_url) as session:
        token = auth.bootstrap_admin(session).token
    with TestClient(create_api(settings), base_url="http://test/api/v1",
                    headers={"Authorization": f"Bearer {token}"}) as client:
        yield settings, client


def config(name: str, **grpo) -> dict:
    return parse_run_config({"name": name, "data": {"corpus": "c", "train": "t"},
                             "grpo": grpo}).model_dump(mode="json")


def add_run(url: str, name: str, steps: list[int], metric=lambda s: {"reward_mean": s / 100},
            **grpo) -> int:
    with db.session_scope(url) as session:
        run = Run(name=name, config=config(name, **grpo))
        session.add(run)
        session.flush()
        session.add_all(RunMetric(run_id=run.id, step=s, stage=s // 10, exemplars=max(0, 2 - s // 10),
                                  values=metric(s)) for s in steps)
        return run.id


def add_rollouts(url: str, run_id: int, count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    with db.session_scope(url) as session:
        for i in range(count):
            step = i // 4
            row = Rollout(run_id=run_id, step=step, sample_index=i % 4, stage=step // 5,
                          exemplars=[3, 2, 0][min(step // 5, 2)], question=f"q{i}",
                          reward=round(rng.random(), 3),
                          segments=[{"source": "prompt", "text": "<think>", "tokens": 0},
                                    {"source": "model", "text": "search", "tokens": 5},
                                    {"source": "env", "text": "found", "tokens": 7},
                                    {"source": "model", "text": "answer", "tokens": 3}])
            session.add(row)
            session.flush()
            rows.append({"id": row.id, "step": row.step, "stage": row.stage,
                         "exemplars": row.exemplars, "reward": row.reward})
    return rows


def all_pages(client, path: str, **params) -> tuple[list[dict], list[int]]:
    """Every item by following next_cursor, and the total each page reported."""
    items, totals, cursor = [], [], None
    while True:
        page = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        body = page.json()
        items += body["items"]
        totals.append(body["total"])
        cursor = body["next_cursor"]
        if cursor is None:
            return items, totals


def test_metric_pages_by_step_range(api):
    settings, client = api
    run_id = add_run(settings.sqlalchemy_url, "m", list(range(25)))
    items, totals = all_pages(client, f"/runs/{run_id}/metrics", limit=10)
    assert [m["step"] for m in items] == list(range(25)) and set(totals) == {25}
    assert len(totals) == 3
    items, totals = all_pages(client, f"/runs/{run_id}/metrics", from_step=5, to_step=17,
                              limit=4)
    assert [m["step"] for m in items] == list(range(5, 18)) and set(totals) == {13}
    assert items[0]["reward_mean"] == 0.05 and items[0]["stage"] == 0
    assert client.get(f"/runs/{run_id}/metrics", params={"limit": 0}).status_code == 422
    assert client.get(f"/runs/{run_id}/metrics", params={"cursor": "x"}).status_code == 422
    assert client.get("/runs/999/metrics").status_code == 404


@pytest.mark.parametrize("filters", [
    {}, {"step_min": 3, "step_max": 7}, {"stage": 1}, {"exemplars": 0},
    {"reward_min": 0.25, "reward_max": 0.5}, {"stage": 2, "reward_min": 0.5},
])
def test_rollout_pages_filter_exactly_and_cover_every_row_once(api, filters):
    settings, client = api
    run_id = add_run(settings.sqlalchemy_url, "r", [])
    other = add_run(settings.sqlalchemy_url, "other", [])
    rows = add_rollouts(settings.sqlalchemy_url, run_id, 60)
    add_rollouts(settings.sqlalchemy_url, other, 8)

    def matches(r):
        return (r["step"] >= filters.get("step_min", -1)
                and r["step"] <= filters.get("step_max", 10**9)
                and filters.get("stage", r["stage"]) == r["stage"]
                and filters.get("exemplars", r["exemplars"]) == r["exemplars"]
                and filters.get("reward_min", -1) <= r["reward"] <= filters.get("reward_max", 2))

    expected = [r["id"] for r in sorted((r for r in rows if matches(r)),
                                        key=lambda r: (r["step"], r["id"]), reverse=True)]
    assert expected, "the filter must match something to prove anything"
    items, totals = all_pages(client, f"/runs/{run_id}/rollouts", limit=7, **filters)
    assert [r["id"] for r in items] == expected and set(totals) == {len(expected)}
    assert all("segments" not in r for r in items)
    by_offset = [r["id"] for offset in range(0, len(expected), 7) for r in client.get(
        f"/runs/{run_id}/rollouts", params={**filters, "limit": 7, "offset": offset}
    ).json()["items"]]
    assert by_offset == expected


def test_rollout_detail_marks_what_the_loss_ignores(api):
    settings, client = api
    run_id = add_run(settings.sqlalchemy_url, "d", [])
    rollout_id = add_rollouts(settings.sqlalchemy_url, run_id, 1)[0]["id"]
    detail = client.get(f"/runs/{run_id}/rollouts/{rollout_id}").json()
    assert [(s["source"], s["tokens"], s["trained"]) for s in detail["segments"]] == [
        ("prompt", 0, False), ("model", 5, True), ("env", 7, False), ("model", 3, True)]
    assert detail["tokens"] == {"prompt": 0, "model": 8, "env": 7}
    other = add_run(settings.sqlalchemy_url, "e", [])
    missing = client.get(f"/runs/{other}/rollouts/{rollout_id}")
    assert missing.status_code == 404 and f"rollout {rollout_id}" in missing.json()["detail"]
    bad = client.get(f"/runs/{run_id}/rollouts", params={"cursor": "nope"})
    assert bad.status_code == 422 and "cursor" in bad.json()["detail"]


def test_a_guided_rollout_says_which_exemplars_it_saw_with_their_questions(api):
    """`hint_exemplars` (indices into the run's exemplar snapshot) in a page and in one
    rollout; the detail adds their questions from the run's plan; not guided: None."""
    settings, client = api
    exemplars = [Exemplar(f"question {i}", "<answer>a</answer>") for i in range(3)]
    with db.session_scope(settings.sqlalchemy_url) as session:
        run = Run(name="g", config=config("g"), plan=RunPlan(
            config=parse_run_config(config("g")), corpus=None,
            train=DataRef(id=1, name="t", content_hash="h"),
            exemplars=[e.to_dict() for e in exemplars]).model_dump(mode="json"))
        session.add(run)
        session.flush()
        guided = Rollout(run_id=run.id, step=0, exemplars=2, hint_exemplars=[2, 0],
                         question="q", segments=[])
        plain = Rollout(run_id=run.id, step=0, question="q", segments=[])
        session.add_all([guided, plain])
        session.flush()
        run_id, ids = run.id, (guided.id, plain.id)
    page = client.get(f"/runs/{run_id}/rollouts").json()["items"]
    assert {r["id"]: r["hint_exemplars"] for r in page} == {ids[0]: [2, 0], ids[1]: None}
    detail = client.get(f"/runs/{run_id}/rollouts/{ids[0]}").json()
    assert (detail["exemplars"], detail["hint_exemplars"], detail["hint_questions"]) == (
        2, [2, 0], ["question 2", "question 0"])
    assert client.get(f"/runs/{run_id}/rollouts/{ids[1]}").json()["hint_questions"] is None
    cards = run_history.rollout_page(settings, run_id, segments=True)["items"]  # Live run's
    assert [r["hint_questions"] for r in cards] == [None, ["question 2", "question 0"]]


def test_a_rollouts_token_arrays_are_served_per_token_and_an_older_rollout_has_none(api):
    settings, client = api
    run_id = add_run(settings.sqlalchemy_url, "t", [])
    older = add_rollouts(settings.sqlalchemy_url, run_id, 1)[0]["id"]
    arrays = TokenArrays(logprob=[-0.25, -3.0, 0.0], entropy=[1.5, 0.75, 0.0],
                         advantage=[0.5, 0.5, 0.0], mask=[1, 1, 0], chars=[2, 2, 5])
    with db.session_scope(settings.sqlalchemy_url) as session:
        row = Rollout(run_id=run_id, step=1, question="q", token_arrays=arrays.pack(),
                      segments=[{"source": "model", "text": "<a>b", "tokens": 2},
                                {"source": "env", "text": "<i>&x", "tokens": 1}])
        session.add(row)
        session.flush()
        rollout_id = row.id
    body = client.get(f"/runs/{run_id}/rollouts/{rollout_id}/tokens").json()
    assert body == {"id": rollout_id, "recorded": True, "tokens": 3, "bytes": 32,
                    "text": ["<a", ">b", "<i>&x"], "segment": [0, 0, 1], "mask": [1, 1, 0],
                    "logprob": [-0.25, -3.0, None], "entropy": [1.5, 0.75, None],
                    "advantage": [0.5, 0.5, 0.0]}
    none = client.get(f"/runs/{run_id}/rollouts/{older}/tokens").json()
    assert none["recorded"] is False and none["mask"] == [] and none["bytes"] == 0
    # a page of rollouts with their tokens (the Live run page's cards) gives the same view
    views = {item["id"]: item["token_view"] for item in run_history.rollout_page(
        settings, run_id, segments=True, tokens=True)["items"]}
    assert views == {rollout_id: {k: v for k, v in body.items() if k != "id"},
                     older: {k: v for k, v in none.items() if k != "id"}}
    assert all("token_view" not in item for item in run_history.rollout_page(
        settings, run_id, segments=True)["items"])
    other = add_run(settings.sqlalchemy_url, "o", [])
    missing = client.get(f"/runs/{other}/rollouts/{rollout_id}/tokens")
    assert missing.status_code == 404 and f"rollout {rollout_id}" in missing.json()["detail"]


def test_compare_aligns_steps_and_lists_config_differences(api):
    settings, client = api
    url = settings.sqlalchemy_url
    a = add_run(url, "a", [0, 1, 2, 3], lr=1e-6)
    b = add_run(url, "b", [0, 2, 4], metric=lambda s: {"reward_mean": s / 10, "acc": s / 20},
                lr=2e-6)
    body = client.get("/runs/compare", params={"ids": f"{a},{b}",
                                               "metrics": "reward_mean,acc"}).json()
    assert [r["id"] for r in body["runs"]] == [a, b]
    assert body["steps"] == [0, 1, 2, 3, 4]
    assert body["series"]["reward_mean"] == [[0.0, 0.01, 0.02, 0.03, None],
                                             [0.0, None, 0.2, None, 0.4]]
    assert body["series"]["acc"] == [[None] * 5, [0.0, None, 0.1, None, 0.2]]
    assert body["differences"] == ["grpo.lr", "name"]
    assert body["configs"][1]["grpo"]["lr"] == 2e-6
    assert {"curriculum.stages", "verl.nnodes"} <= set(body["unused"][0])  # preset, native
    everything = client.get("/runs/compare", params={"ids": f"{b},{a},{b}"}).json()
    assert [r["id"] for r in everything["runs"]] == [b, a]
    assert {"acc", "reward_mean", "stage", "exemplars"} <= set(everything["metrics"])
    for params, status, words in (({"ids": f"{a},x"}, 422, "'x'"), ({"ids": f"{a},999"}, 404,
                                  "run 999"), ({"ids": f"{a}", "metrics": "nope"}, 422, "nope")):
        answer = client.get("/runs/compare", params=params)
        assert answer.status_code == status and words in answer.json()["detail"]


def test_compare_fills_keys_added_since_a_run_was_launched(api):
    """A run stored before `mirror` existed ran without mirroring: no difference there."""
    settings, client = api
    url = settings.sqlalchemy_url
    old, new = add_run(url, "old", [0]), add_run(url, "new", [0])
    with db.session_scope(url) as session:
        run = session.get(Run, old)
        run.config = {k: v for k, v in run.config.items() if k != "mirror"}
        session.add(run)
    body = client.get("/runs/compare", params={"ids": f"{old},{new}"}).json()
    assert body["differences"] == ["name"]
    assert body["configs"][0]["mirror"] == {"tensorboard": False}


def test_config_yaml_downloads_what_launch_takes_back(api):
    settings, client = api
    run_id = add_run(settings.sqlalchemy_url, "demo 3/2/0", [], lr=3e-6)
    answer = client.get(f"/runs/{run_id}/config.yaml")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith(
        "application/yaml")
    assert answer.headers["content-disposition"] == \
        f'attachment; filename="run-{run_id}-demo-3-2-0.yaml"'
    assert parse_run_config(answer.text).model_dump(mode="json") == config("demo 3/2/0",
                                                                            lr=3e-6)
    assert yaml.safe_load(answer.text)["grpo"]["lr"] == 3e-6
    assert client.get("/runs/999/config.yaml").status_code == 404


def test_event_history_is_a_json_list_in_step_order(api):
    settings, client = api
    run_id = add_run(settings.sqlalchemy_url, "ev", [])
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.add_all([RunEvent(run_id=run_id, step=5, kind="warning", message="w"),
                         RunEvent(run_id=run_id, step=0, kind="stage_change", message="s")])
    events = client.get(f"/runs/{run_id}/events/history").json()
    assert [(e["step"], e["kind"]) for e in events] == [(0, "stage_change"), (5, "warning")]
    warnings = client.get(f"/runs/{run_id}/events/history", params={"kind": "warning"}).json()
    assert [e["message"] for e in warnings] == ["w"]


def test_a_missing_run_is_a_404_on_every_route_and_an_empty_one_is_not(api):
    settings, client = api
    empty = add_run(settings.sqlalchemy_url, "empty", [])
    for path in ("/runs/{}/metrics", "/runs/{}/rollouts", "/runs/{}/rollouts/1",
                 "/runs/{}/rollouts/1/tokens", "/runs/{}/events/history",
                 "/runs/{}/config.yaml"):
        missing = client.get(path.format(999))
        assert missing.status_code == 404 and "run 999" in missing.json()["detail"], path
        if "rollouts/1" not in path:
            assert client.get(path.format(empty)).status_code == 200, path
    assert client.get(f"/runs/{empty}/rollouts").json() == {"items": [], "total": 0,
                                                            "next_cursor": None}
