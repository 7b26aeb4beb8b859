"""Malformed input never answers 5xx: generated uploads (corpora, QA sets, exemplar sets)
and run configs (validate and launch), numbers no database column holds, in every integer
parameter of the API.

Each refusal is a 4xx whose message names its field, file or line, and a refused upload
leaves no row and no file behind. The generated examples are the same on every run (CI must
not fail by chance); `STUDIO_FUZZ_RANDOM=1` draws new ones, `STUDIO_FUZZ_EXAMPLES=N` draws
more.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontend.server import create_app
from studio import db
from studio.services import corpora, exemplar_sets, qa_sets, runs
from studio.services.demo import load_demo_pack
from studio.settings import Settings
from tests.support.actors import admin
from tests.support.api_client import bearer
from tests.support.tiny_model import build_tiny_model

EXAMPLES = int(os.environ.get("STUDIO_FUZZ_EXAMPLES", "500"))  # per test: 1,000 in all
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                derandomize=not os.environ.get("STUDIO_FUZZ_RANDOM"),
                suppress_health_check=list(HealthCheck))
BIG = 2**63
FIELD_FIRST = re.compile(r"^[\w.\[\]-]+: ")


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    s = Settings(data_dir=root / "data", max_upload_bytes=200_000, max_upload_rows=500,
                 max_archive_members=20, max_unpacked_bytes=400_000)
    s.resolved_data_dir.mkdir(parents=True)
    db.upgrade(s.sqlalchemy_url)
    load_demo_pack(s, admin(s), index_now=True)
    model = str(build_tiny_model(root / "tiny"))
    with TestClient(create_app(s)) as client:
        yield s, client, bearer(s, admin(s)), model


def _stored(s: Settings) -> dict:
    """What an upload or a launch can leave: rows, and files under tmp/ and uploads/."""
    root = s.resolved_data_dir
    return {"rows": [len(corpora.list_corpora(s)), len(qa_sets.list_qa_sets(s)),
                     len(exemplar_sets.list_exemplar_sets(s)), len(runs.list_runs(s))],
            "files": sorted(str(p.relative_to(root)) for folder in ("tmp", "uploads")
                            for p in (root / folder).rglob("*"))}


# --- generated uploads ---------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-BIG * 4, max_value=BIG * 4)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["text", "contents", "title", "id", "question", "golden_answers",
                         "answer", "solution", "answers", "_id", "paragraphs", "context"])
        | st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@st.composite
def jsonl(draw) -> bytes:
    lines = draw(st.lists(json_values.map(json.dumps) | st.text(max_size=30), max_size=8))
    return "\n".join(lines).encode(draw(st.sampled_from(["utf-8", "utf-16", "latin-1"])),
                                   errors="replace")


@st.composite
def csv_text(draw) -> bytes:
    header = draw(st.sampled_from(["question,answer", "question,answers", "text,title",
                                   "id,contents", "q;a", ""]))
    rows = draw(st.lists(st.lists(st.text(max_size=15), min_size=1, max_size=4)
                         .map(lambda cells: ",".join(cells)), max_size=8))
    return "\n".join([header, *rows]).encode()


@st.composite
def nested(draw) -> bytes:
    depth = draw(st.integers(1, 4000))
    return ("[" * depth + "]" * depth).encode() if draw(st.booleans()) else \
        ('{"question": ' + "[" * depth + "]" * depth + "}").encode()


@st.composite
def archive(draw) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zipped:
        for name in draw(st.lists(st.sampled_from(
                ["a.jsonl", "b.txt", "../up.txt", "/abs.txt", "dir/c.csv", "d.zip", "e.bin"])
                | st.text(min_size=1, max_size=12), max_size=4, unique=True)):
            member = zipfile.ZipInfo(name)
            if draw(st.integers(0, 5)) == 0:  # a symbolic link
                member.external_attr = 0o120777 << 16
            zipped.writestr(member, draw(jsonl() | csv_text() | st.binary(max_size=200)))
    return buf.getvalue()


HUGE = "9" * 5000  # Python will not turn more than 4,300 digits into an int
unstorable = st.builds(  # a record holding a value no database column stores
    lambda key, value: f'{{"question": "q", "golden_answers": ["a"], "{key}": {value}}}'.encode(),
    st.sampled_from(["question", "id", "text", "solution"]),
    st.sampled_from([HUGE, "-" + HUGE, '"a\\u0000b"', '["\\u0000"]']))
contents = st.binary(max_size=500) | jsonl() | csv_text() | nested() | archive() | \
    unstorable | st.just(b"") | st.just(b"x" * 250_000)
# httpx percent-encodes control characters, '"' and '\\' in a multipart file name (the
# service tests send such names as they are)
stems = st.text(st.characters(exclude_categories=("Cc", "Cs"), exclude_characters='"\\'),
                max_size=12)
filenames = st.builds(lambda stem, suffix: stem + suffix, stems,
                      st.sampled_from([".jsonl", ".json", ".csv", ".tsv", ".txt", ".md",
                                       ".parquet", ".zip", ".exe", ""]))
names = st.text(max_size=140) | st.sampled_from(["demo", "", "  ", "a\x00b", "x\ny"])
UPLOADS = {
    "/corpora": st.fixed_dictionaries({
        "backend": st.sampled_from(["bm25s", "rank_bm25", "lucene", ""]),
        "params": st.sampled_from(["{}", "[]", "nope", '{"k1": -1}', '{"k1": "x"}',
                                   '{"b": 1e400}', '{"stemmer": 5}']),
        "split_on_blank_lines": st.sampled_from(["true", "false", "maybe"])}),
    "/qa-sets": st.fixed_dictionaries({
        "purpose": st.sampled_from(["train", "eval", "both", ""]),
        "format": st.sampled_from(["flashrag-jsonl", "hotpotqa-json", "musique-json", "csv",
                                   "xml"])}),
    "/exemplar-sets/upload": st.fixed_dictionaries({}),
}


def _names_its_place(detail: str, filename: str) -> bool:
    """A refusal starts with the field it is about, or with the file (and then its line)."""
    return bool(FIELD_FIRST.match(detail)) or detail.startswith(
        Path(filename.replace("\\", "/")).name.strip())


@FUZZ
@given(route=st.sampled_from(sorted(UPLOADS)), data=st.data(), content=contents,
       filename=filenames, name=names)
def test_malformed_uploads_are_refused_with_their_place_and_leave_nothing(
        studio, route, data, content, filename, name):
    s, client, headers, _ = studio
    form = {"name": name, **data.draw(UPLOADS[route])}
    if route == "/qa-sets" and data.draw(st.booleans()):
        form.pop("format")  # detected from the file
    before = _stored(s)
    answer = client.post(f"/api/v1{route}", headers=headers,
                         files={"file": (filename, content)}, data=form)
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        detail = answer.json()["detail"]
        assert isinstance(detail, str) and _names_its_place(detail, filename), detail
        assert _stored(s) == before, f"a refused upload left something: {detail}"


# --- generated run configs --------------------------------------------------------------------

junk = json_values | st.sampled_from([BIG, -BIG, 1e30, -1, 0, float("nan"), float("inf"),
                                      "", "NaN", [], {}, None, True])
CONFIG_PATHS = [
    ("name",), ("model",), ("backend",), ("queue",), ("seed",), ("data", "corpus"),
    ("data", "train"), ("data", "eval"), ("data", "exemplars"), ("curriculum", "preset"),
    ("curriculum", "steps_per_stage"), ("curriculum", "stages"), ("grpo", "steps"),
    ("grpo", "batch_size"), ("grpo", "group_size"), ("grpo", "lr"), ("grpo", "kl_coef"),
    ("grpo", "temperature"), ("grpo", "max_turns"), ("grpo", "top_k"),
    ("grpo", "max_response_tokens"), ("grpo", "max_obs_tokens"), ("reward", "acc_weight"),
    ("reward", "format_weight"), ("engine", "threads"), ("engine", "checkpoint_every"),
    ("lora", "rank"), ("lora",), ("prompt", "layout"), ("prompt", "assistant_prefix"),
    ("mirror",), ("verl", "gpus_per_node"), ("unknown_key",), ("grpo", "unknown"),
]


def _valid_config(model: str) -> dict:
    return {"name": "fuzz", "model": model,
            "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"},
            "curriculum": {"stages": [{"exemplars": 1, "steps": 1}]},
            "grpo": {"batch_size": 1, "group_size": 2}}


def _set(config: dict, path: tuple[str, ...], value) -> dict:
    node = config
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return config


@FUZZ
@given(route=st.sampled_from(["/runs/validate", "/runs"]),
       changes=st.lists(st.tuples(st.sampled_from(CONFIG_PATHS), junk), min_size=1,
                        max_size=3),
       whole=st.none() | junk)
def test_malformed_run_configs_are_refused_naming_the_field(studio, route, changes, whole):
    s, client, headers, model = studio
    body = whole if whole is not None else _valid_config(model)
    if whole is None:
        for path, value in changes:
            _set(body, path, value)
    before = _stored(s)
    answer = client.post(f"/api/v1{route}", content=json.dumps(body, allow_nan=True),
                         headers={**headers, "Content-Type": "application/json"})
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        detail = answer.json()["detail"]
        assert isinstance(detail, str) and FIELD_FIRST.match(detail), detail
        assert _stored(s) == before, f"a refused launch left something: {detail}"


# --- numbers no column holds ------------------------------------------------------------------


def _integer(schema: dict) -> bool:
    return schema.get("type") == "integer" or any(
        option.get("type") == "integer" for option in schema.get("anyOf", []))


def test_every_integer_parameter_refuses_2_to_the_63(studio):
    """Ids, steps, offsets, limits: 2^63 (and 10^30) is a 422 naming the parameter."""
    s, client, headers, _ = studio
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    tried = 0
    for path, methods in paths.items():
        for method, operation in methods.items():
            parameters = operation.get("parameters", [])
            for tested in (p for p in parameters if _integer(p["schema"])):
                for number in (BIG, 10**30):
                    url = path
                    query = {}
                    for p in parameters:
                        value = number if p is tested else (1 if _integer(p["schema"]) else "x")
                        if p["in"] == "path":
                            url = url.replace("{" + p["name"] + "}", str(value))
                        elif p is tested or p.get("required"):
                            query[p["name"]] = value
                    answer = client.request(method, url, headers=headers, params=query)
                    tried += 1
                    assert answer.status_code == 422, (method, url, query, answer.text)
                    assert answer.json()["detail"].startswith(f"{tested['name']}: "), answer.text
    assert tried >= 40, "the API's integer parameters were found"


@pytest.mark.parametrize("path, params, field", [
    ("/runs/compare", {"ids": str(BIG)}, "ids"),
    ("/runs/compare", {"ids": "1,²"}, "ids"),
    ("/runs/1/metrics", {"cursor": str(BIG)}, "cursor"),
    ("/runs/1/rollouts", {"cursor": f"1.{BIG}"}, "cursor"),
])
def test_numbers_inside_text_parameters_are_bounded_too(studio, path, params, field):
    s, client, headers, model = studio
    answer = client.get(f"/api/v1{path}", headers=headers, params=params)
    assert answer.status_code in (404, 422), answer.text
    if answer.status_code == 422:
        assert answer.json()["detail"].startswith(f"{field}: ")


@pytest.mark.parametrize("route, body", [
    ("/evaluations", {"qa_set": "demo", "model": "m", "run_id": BIG}),
    ("/evaluations", {"qa_set": "demo", "model": "m", "limit": BIG}),
    ("/qa-sets/1/split", {"seed": BIG}),
    ("/corpora/1/retrieve", {"queries": ["x"], "topk": BIG}),
    ("/runs/1/exports", {"target": "folder", "step": BIG}),
    ("/calibrations", {"model": "m", "threads": BIG}),
])
def test_integers_in_bodies_are_bounded(studio, route, body):
    s, client, headers, _ = studio
    answer = client.post(f"/api/v1{route}", headers=headers, json=body)
    assert answer.status_code == 422, answer.text
    field = next(key for key, value in body.items() if value == BIG)
    assert answer.json()["detail"].startswith(f"{field}: "), answer.text


# --- values no database stores ----------------------------------------------------------------

UNSTORABLE_FILES = {  # (route, file): its text, with the value on line 2
    ("/qa-sets", "qa.jsonl"): '{"question": "q1", "golden_answers": ["a"]}\n'
                              '{"question": "q2", "golden_answers": ["a"], "id": %s}\n',
    ("/qa-sets", "hotpot.json"): '[{"_id": "h1", "question": "q1", "answer": "a"},\n'
                                 '{"_id": %s, "question": "q2", "answer": "a"}]\n',
    ("/qa-sets", "qa.csv"): 'question,answers\nq1,"[""a""]"\nq2,"[%s]"\n',
    ("/corpora", "docs.jsonl"): '{"id": "d1", "contents": "a"}\n{"id": %s, "contents": "b"}\n',
    ("/exemplar-sets/upload", "ex.jsonl"):
        '{"question": "q", "solution": "<answer> a </answer>"}\n'
        '{"question": "q", "solution": "<answer> a </answer>", "n": %s}\n',
}


@pytest.mark.parametrize("value", [HUGE, '"a\\u0000b"'], ids=["huge-integer", "nul"])
def test_a_huge_integer_or_a_nul_in_an_upload_is_a_422_naming_its_line(any_db_url, tmp_path,
                                                                       value):
    """Each was a 500 (an uncaught ValueError; PostgreSQL refuses NUL in text)."""
    s = Settings(data_dir=tmp_path / "data", database_url=any_db_url)
    s.resolved_data_dir.mkdir(parents=True)
    db.upgrade(s.sqlalchemy_url)
    with TestClient(create_app(s)) as client:
        headers = bearer(s, admin(s))
        for (route, filename), text in UNSTORABLE_FILES.items():
            content = (text % (value.replace('"', '""') if filename.endswith(".csv") and
                               value.startswith('"') else value)).encode()
            answer = client.post(f"/api/v1{route}", headers=headers,
                                 files={"file": (filename, content)}, data={"name": "x"})
            assert answer.status_code == 422, (filename, answer.text)
            detail = answer.json()["detail"]
            assert "line 2" in detail or "line 3" in detail, (filename, detail)
            assert ("5000 digits" if value == HUGE else "NUL") in detail, (filename, detail)
        assert _stored(s)["rows"] == [0, 0, 0, 0]


@pytest.mark.parametrize("route", ["/qa-sets", "/corpora"])
def test_a_header_of_many_columns_gets_a_short_message(studio, route):
    """A 100,000-column CSV header made a 1.2 MB message; it names the first columns and
    counts the rest."""
    s, client, headers, _ = studio
    before = _stored(s)
    header = ",".join(f"column{i}" for i in range(15_000))
    answer = client.post(f"/api/v1{route}", headers=headers,
                         files={"file": ("wide.csv", f"{header}\nx\n".encode())},
                         data={"name": "wide"})
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert len(detail) < 1000 and '"column0", "column1"' in detail and "and 14980 more" in detail
    assert _stored(s) == before
