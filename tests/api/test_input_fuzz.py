"""Malformed input never answers 5xx: generated uploads (corpora, QA sets, exemplar sets),
run configs (validate and launch), form fields, query parameters and path ids of every
route, numbers no database column holds, in every integer parameter of the API, and JSON
no column stores, in every body.

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
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from frontend.server import create_app
from studio.method.json_values import NUL_PROBLEM
from studio.services import corpora, exemplar_sets, qa_sets, runs
from studio.services.demo import load_demo_pack
from studio.settings import Settings
from studio.storage import db
from tests.support.actors import admin
from tests.support.api_client import bearer
from tests.support.tiny_model import build_tiny_model

EXAMPLES = int(os.environ.get("STUDIO_FUZZ_EXAMPLES", "500"))  # per test: 1,500 in all
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
def test_a_huge_integer_or_a_nul_in_an_upload_is_a_422_naming_its_line(migrated_db_url, tmp_path,
                                                                       value):
    """Each was a 500 (an uncaught ValueError; PostgreSQL refuses NUL in text)."""
    s = Settings(data_dir=tmp_path / "data", database_url=migrated_db_url)
    s.resolved_data_dir.mkdir(parents=True)
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


# --- ids, and JSON sent in a request ----------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/runs/%20%201"), ("GET", "/qa-sets/+1"), ("GET", "/corpora/1.0"),
    ("GET", "/exemplar-sets/1_0"), ("GET", "/qa-sets/%EF%BC%91"),
    ("DELETE", "/exemplar-sets/1/exemplars/+1"), ("GET", "/evaluations?run_id=%2B1")])
def test_an_id_is_written_in_digits_only(studio, method, path):
    """`/runs/%20%201` and `/qa-sets/+1` answered object 1: Python's int() and pydantic take
    spaces, a sign, '_' and '.0' around an id."""
    s, client, headers, _ = studio
    answer = client.request(method, f"/api/v1{path}", headers=headers)
    assert answer.status_code == 422, answer.text
    assert re.fullmatch(r"\w+: an id is written in digits only, e.g. 12",
                        answer.json()["detail"]), answer.text


HUGE_NUMBER = (f"a number of {len(HUGE)} digits; a number may have at most 100 (write a long "
               "id as a string)")


def _json_operations(client, headers) -> list[tuple[str, str]]:
    """Every API route that takes a JSON body, its path ids filled in."""
    paths = client.get("/api/v1/openapi.json", headers=headers).json()["paths"]
    return [(method, re.sub(r"\{(\w+)\}", lambda m: "admin" if m[1] == "username" else "1",
                            path))
            for path, methods in paths.items() for method, operation in methods.items()
            if "application/json" in operation.get("requestBody", {}).get("content", {})]


def test_json_in_every_body_and_form_field_goes_through_the_one_decoder(studio):
    """A 5,000-digit integer was a 500 in the corpus form's `params` (json.loads) and
    FastAPI's 400 in a JSON body; a NUL went on to the database. The uploads' decoder
    refuses both, naming the field, wherever a request sends JSON."""
    s, client, headers, _ = studio
    before = _stored(s)
    operations = _json_operations(client, headers)
    assert len(operations) >= 20, "the API's JSON routes were found"
    for method, path in operations:
        for value, problem in ((HUGE, HUGE_NUMBER), ('"a\\u0000b"', NUL_PROBLEM)):
            answer = client.request(method, path, content=f'{{"a": {value}}}',
                                    headers={**headers, "Content-Type": "application/json"})
            assert (answer.status_code, answer.json()["detail"]) == (422, f"body: {problem}"), \
                (method, path, answer.text)
    params = client.post("/api/v1/corpora", headers=headers, data={
        "name": "p", "params": f'{{"k1": {HUGE}}}'}, files={"file": ("d.jsonl", b'{"text": "a"}')})
    assert (params.status_code, params.json()["detail"]) == (422, f"params: {HUGE_NUMBER}")
    card = client.post("/api/v1/runs/from-card", headers=headers, json={"card": "[" * 100_000})
    assert card.status_code == 422 and card.json()["detail"].startswith(
        "holds no reproducibility bundle"), card.text
    assert _stored(s) == before


# --- generated form fields, query parameters and path ids -------------------------------------

ODD_IDS = ["%20%201", " 1", "1 ", "+1", "1_0", "1.0", "01", "\u0661", "\uff11", "0", "-1", "1e3",
           str(BIG), "9" * 5000, "1/2", "1?x=1"]
path_ids = st.sampled_from(ODD_IDS) | st.integers(-BIG, BIG * 4).map(str) | \
    st.text(min_size=1, max_size=12).filter(lambda text: text.strip(".") != "")
field_texts = st.text(max_size=40) | json_values.map(json.dumps) | st.sampled_from(
    ["", " ", "1", "-1", str(BIG), "1e400", "nan", "true", "null", "[]", "{}", HUGE,
     f'{{"k1": {HUGE}}}', '{"k1": 1.2, "b": 0.75}', "[" * 3000, "a\x00b", "x" * 5000])
UPLOADED = ("d.jsonl", b'{"text": "a", "question": "q", "golden_answers": ["a"], '
                       b'"solution": "<answer> a </answer>"}\n')
mostly = st.integers(0, 3).map(bool)  # True three times in four


@pytest.fixture(scope="module")
def operations(studio):
    """The API's operations as the fuzz draws them: method, path, its path and query
    parameters, its form fields (None: no form). The event stream (it follows a run until it
    ends) and the changes to users are left out."""
    s, client, headers, _ = studio
    schema = client.get("/api/v1/openapi.json", headers=headers).json()
    found = []
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            if path.endswith("/events") or (method != "get" and "{username}" in path):
                continue
            parameters = operation.get("parameters", [])
            form = operation.get("requestBody", {}).get("content", {}).get(
                "multipart/form-data")
            fields = None if form is None else sorted(schema["components"]["schemas"][
                form["schema"]["$ref"].rsplit("/", 1)[1]]["properties"])
            found.append((method.upper(), path,
                          [p["name"] for p in parameters if p["in"] == "path"],
                          [p["name"] for p in parameters if p["in"] == "query"], fields))
    return found


@FUZZ
@given(data=st.data())
def test_generated_form_fields_queries_and_ids_never_get_a_5xx(studio, operations, data):
    """Every route, its form fields (uploads), query parameters and path ids drawn: no 5xx,
    and an id not written in digits names no object."""
    s, client, headers, _ = studio
    forms = [operation for operation in operations if operation[4] is not None]
    method, path, ids, queries, fields = data.draw(st.sampled_from(forms) |
                                                   st.sampled_from(operations))
    url, odd_id = path, False
    for name in ids:
        value = data.draw(path_ids)
        odd_id = odd_id or not (value.isascii() and value.isdigit()) and name != "label"
        # a change drawn with a well-formed id could delete the data the other draws use
        assume(method == "GET" or not (value.isascii() and value.isdigit()))
        url = url.replace("{" + name + "}", quote(value, safe=""))
    request = {"params": {name: data.draw(field_texts) for name in queries
                          if data.draw(mostly)}}
    if fields is not None:
        request["data"] = {name: data.draw(field_texts) for name in fields
                           if name != "file" and data.draw(mostly)}
        if data.draw(mostly):
            request["files"] = {"file": UPLOADED}
    elif method != "GET" and data.draw(st.booleans()):
        request["json"] = data.draw(json_values)
    answer = client.request(method, url, headers=headers, **request)
    assert answer.status_code < 500, (method, url, request, answer.text)
    assert not odd_id or answer.status_code >= 400, (method, url, answer.text)
