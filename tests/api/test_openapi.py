"""The API's OpenAPI document describes what the routes take: a run config's whole schema."""

from __future__ import annotations

import json

from studio.run_config import RunConfig


def test_the_run_routes_document_the_run_configs_schema(api):
    spec = api.get("/openapi.json").json()
    for path in ("/api/v1/runs", "/api/v1/runs/validate"):
        body = spec["paths"][path]["post"]["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        assert body["required"] is True
        assert set(schema["properties"]) == set(RunConfig.model_fields)
        grpo = schema["properties"]["grpo"]
        assert grpo["properties"]["lr"]["exclusiveMinimum"] == 0
        assert grpo["properties"]["batch_size"]["title"] == "Questions per step"
        assert "$ref" not in json.dumps(schema)  # written in place: nothing left to resolve


def test_a_bad_config_still_gets_the_studios_field_errors(api):
    answer = api.post("/runs/validate", json={"name": "x", "grpo": {"lr": -1}})
    assert answer.status_code == 422
    assert "grpo.lr" in answer.json()["detail"]
    for grpo in ({"steps": 1e30}, {"steps": 10**7}, {"max_turn_tokens": 2**63}):
        bad = {"name": "x", "data": {"corpus": "c", "train": "t"}, "grpo": grpo}
        launched, validated = api.post("/runs", json=bad), api.post("/runs/validate", json=bad)
        assert launched.status_code == validated.status_code == 422  # the two agree
        assert launched.json() == validated.json()
        assert launched.json()["detail"].startswith(f"grpo.{next(iter(grpo))}: ")
    assert api.get("/runs").json() == []


def test_run_and_evaluation_answers_are_documented_models(api):
    spec = api.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def answer(path: str, method: str = "get") -> dict:
        return spec["paths"][path][method]["responses"]["200"]["content"]["application/json"][
            "schema"]

    assert answer("/api/v1/runs/{run_id}") == {"$ref": "#/components/schemas/RunView"}
    assert answer("/api/v1/runs")["items"] == {"$ref": "#/components/schemas/RunView"}
    assert answer("/api/v1/evaluations/{evaluation_id}") == \
        {"$ref": "#/components/schemas/EvaluationView"}
    assert {"state", "queue_position", "checkpoint_dir", "config"} <= \
        set(schemas["RunView"]["properties"])
    assert {"stages", "warnings", "time_estimate"} <= set(schemas["LaunchedRun"]["properties"])
    pair = answer("/api/v1/runs/{run_id}/base-vs-trained")["items"]
    assert pair == {"$ref": "#/components/schemas/BaseVsTrained"}
