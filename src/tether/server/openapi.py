"""The OpenAPI document, complete: the web framework writes the routes, their parameters and request bodies;
what each route answers is described here from the msgspec types the route encodes
(`msgspec.json.schema_components`), and every error status from `ErrorBody`, so that the spec and the
answers come from the same types. `Routes` records what each route answers as it is added."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ..wire import ErrorBody

REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Answer:
    """What a route answers with one status: a msgspec type as JSON (or `media_type` with a schema)."""

    type: Any
    description: str
    media_type: str = "application/json"
    schema: dict[str, Any] | None = None
    """A schema given as it is (for a media type that is not JSON; the type, if any, is documented beside it)."""
    also: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Other media types the route may answer with, by their schema."""


ERROR_DESCRIPTIONS = {
    400: "Bad input: an invalid id, option or cursor (`invalid_input`, `invalid_id`)",
    401: "No token, or the wrong one (`unauthorized`)",
    403: "A Host or Origin this server does not answer (`forbidden_host`, `forbidden_origin`)",
    404: "No such session, entry or route (`session_not_found`, `not_found`)",
    409: "The session is busy: a run holds it (`session_busy`, with the holder in `details`), or it needs a yes",
    413: "The body passed its size limit (`payload_too_large`)",
    422: "The request does not validate (`invalid_request`), or a configuration or file that cannot be used",
    500: "An error the server did not expect (`internal`); no traceback is sent",
    502: "The model provider failed (`provider_error` & co.)",
    503: "The store is busy or unavailable (`store_busy`, `store_unavailable`)",
}
COMMON_ERRORS = (400, 401, 403, 500, 503)
HTTP_LAYER_400 = {
    "schema": {
        "type": "string",
        "description": "A request the HTTP layer cannot parse (a bad character in its line or a header): the server "
        "answers it itself, in plain text, before any route sees it",
    }
}


@dataclass
class Routes:
    """The answers of each operation, by (method, path), for `openapi`."""

    answers: dict[tuple[str, str], tuple[dict[int, Answer], tuple[int, ...]]] = field(default_factory=dict)

    def add(
        self,
        app: FastAPI,
        method: str,
        path: str,
        endpoint: Callable[..., Any],
        *,
        answers: dict[int, Answer],
        errors: tuple[int, ...] = (),
        summary: str,
        tag: str,
        **extra: Any,
    ) -> None:
        status = min(answers)
        responses: dict[int | str, dict[str, Any]] = {s: {"description": a.description} for s, a in answers.items()}
        app.add_api_route(
            path,
            endpoint,
            methods=[method],
            status_code=status,
            summary=summary,
            tags=[tag],
            responses=responses,
            **extra,
        )
        self.answers[(method.lower(), path)] = (answers, tuple(sorted({*errors, *COMMON_ERRORS})))


def _not_null(parameter: dict[str, Any]) -> None:
    """A parameter that may be left out is left out to say none: a header or a query string has no null (the
    framework writes ``str | None`` as a choice of a string or null, which a client would send as "null")."""
    schema = parameter.get("schema", {})
    choices = schema.get("anyOf")
    if isinstance(choices, list):
        kept = [c for c in choices if c != {"type": "null"}]
        if len(kept) == 1 and len(kept) < len(choices):
            del schema["anyOf"]
            schema.update(kept[0])


def _event_stream(schema: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """An event stream's schema, event by event (as schemathesis and OpenAPI 3.2's `itemSchema` read one):
    each frame's `id`, its `event` name and its `data`, one JSON document of the item schema."""
    return {
        "type": "object",
        "description": schema.get("description", "text/event-stream"),
        "required": ["data"],
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "event": {"type": "string"},
            "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": item},
        },
    }


def build_openapi(app: FastAPI, routes: Routes, *, extra_types: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The whole document (see the module docstring)."""
    spec = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes, tags=app.openapi_tags
    )
    types: list[Any] = [ErrorBody, *extra_types]
    for answers, _ in routes.answers.values():
        types += [a.type for a in answers.values() if a.type is not None]
    unique = list(dict.fromkeys(types))
    schemas, components = msgspec.json.schema_components(unique, ref_template=REF)
    by_type = dict(zip(unique, schemas, strict=True))
    spec.setdefault("components", {}).setdefault("schemas", {})
    spec["components"]["schemas"].pop("HTTPValidationError", None)
    spec["components"]["schemas"].pop("ValidationError", None)
    spec["components"]["schemas"].update(components)
    error_ref = by_type[ErrorBody]
    for (method, path), (answers, errors) in routes.answers.items():
        operation = spec["paths"][path][method]
        for parameter in operation.get("parameters", []):
            _not_null(parameter)
        responses = operation.setdefault("responses", {})
        for status, answer in answers.items():
            schema = answer.schema or by_type[answer.type]
            if answer.media_type == "text/event-stream" and answer.type is not None:
                schema = _event_stream(schema, by_type[answer.type])
            entry = responses.setdefault(str(status), {"description": answer.description})
            entry["content"] = {answer.media_type: {"schema": schema}}
            if answer.schema is not None and answer.type is not None:
                entry["content"][answer.media_type]["x-item-schema"] = by_type[answer.type]
            for media_type, other in answer.also.items():
                entry["content"][media_type] = {"schema": other}
        has_input = bool(operation.get("parameters")) or "requestBody" in operation
        codes = {*errors, *((422,) if has_input else ()), *((413,) if "requestBody" in operation else ())}
        for status in sorted(codes):
            entry = {
                "description": ERROR_DESCRIPTIONS.get(status, "An error"),
                "content": {"application/json": {"schema": error_ref}},
            }
            if status in answers:  # an error that may also come as another media type (a page for a browser)
                entry["description"] = answers[status].description
                entry["content"].update(responses[str(status)]["content"])
            if status == 400:
                entry["content"]["text/plain"] = HTTP_LAYER_400
            responses[str(status)] = entry
    spec["components"].setdefault("securitySchemes", {})["bearer"] = {"type": "http", "scheme": "bearer"}
    spec["security"] = [{"bearer": []}, {}]
    return spec
