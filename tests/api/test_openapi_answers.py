"""Every answer of the API is documented: an operation that answers JSON names what the JSON
holds, and one that answers a file or a stream names its media type."""

from __future__ import annotations

JSON = "application/json"


def _typed(schema: dict, components: dict, seen: frozenset = frozenset()) -> bool:
    """Whether `schema` says what the answer holds: a model with properties, a list of typed
    items, a union of typed schemas or a scalar; not `{}` nor a bare `object`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return name not in seen and _typed(components[name], components, seen | {name})
    for union in ("anyOf", "oneOf", "allOf"):
        if union in schema:
            parts = [part for part in schema[union] if part.get("type") != "null"]
            return bool(parts) and all(_typed(part, components, seen) for part in parts)
    kind = schema.get("type")
    if kind == "array":
        return _typed(schema.get("items", {}), components, seen)
    if kind == "object" or kind is None:
        return bool(schema.get("properties"))
    return True  # string, integer, number, boolean


def _answers(spec: dict):
    """(operation, status code, response) of each 2xx response in the document."""
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                if code.startswith("2"):
                    yield f"{method.upper()} {path} {code}", code, response


def test_every_json_answer_has_a_response_schema(api):
    spec = api.get("/openapi.json").json()
    components = spec.get("components", {}).get("schemas", {})
    json_answers, untyped = 0, []
    for operation, _code, response in _answers(spec):
        content = response.get("content", {})
        if JSON not in content:
            continue  # a file, a stream or no body: the next test checks those
        json_answers += 1
        if not _typed(content[JSON].get("schema", {}), components):
            untyped.append(operation)
    assert json_answers > 60  # the document was read: the API's JSON routes are there
    assert not untyped, "JSON answers without a response schema (declare a TypedDict view " \
        "as the route's return type): " + ", ".join(untyped)


def test_every_other_answer_names_its_media_type(api):
    """A route that answers a file, a stream or a redirect sets its response_class (and, when
    that class names no media type, `responses`), so that the document says what comes."""
    spec = api.get("/openapi.json").json()
    silent = [operation for operation, code, response in _answers(spec)
              if code != "204" and not response.get("content")]
    assert not silent, "2xx answers without a media type: " + ", ".join(silent)
    media = {media_type for _, _, response in _answers(spec)
             for media_type in response.get("content", {})}
    assert {"image/png", "application/zip", "application/yaml", "text/event-stream"} <= media
