"""The OpenAPI document is complete and accurate: a property-based run of it (schemathesis, hypothesis
underneath) sends generated input to every operation of the real server and checks each answer: never a
500, a status and a content type the spec lists, a body that matches the spec's schema, and every 4xx a
typed error with a code. The event streams are checked the same way up to their headers (their body does
not end)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tether.messages import Message
from tether.server import ServerSettings
from tether.wire import ABSOLUTE_PATH, SESSION_REF

from .conftest import Served, serve


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("openapi"), settings=ServerSettings(max_body=64 << 10)) as served:
        yield served


def test_the_spec_lists_every_route_with_its_answers(live: Served) -> None:
    spec = requests.get(live.url + "/openapi.json", timeout=30).json()
    routes = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    served = {
        (method, route.path)
        for route in live.server.app.routes
        for method in getattr(route, "methods", set()) or ()
        if route.path not in ("/openapi.json", "/", "/ui/{path:path}") and method != "HEAD"  # the web page
    }
    assert served == routes
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert any(code.startswith("2") for code in op["responses"]), (method, path)
            assert op["responses"]["500"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }
    assert {"SessionInfo", "Entry", "ErrorBody", "RunAccepted", "RunStarted", "Done"} <= set(
        spec["components"]["schemas"]
    )


def test_bounds_are_written_in_json_schema_s_own_words(live: Served) -> None:
    """minimum/maximum, never pydantic's ge/le: those the bounds of an optional integer (max_steps, a fork's
    `at`, keep_tokens) came out as, which JSON Schema ignores, so a client generated from the spec allowed
    what the server then refused with 422."""
    spec = requests.get(live.url + "/openapi.json", timeout=30).json()
    foreign: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("ge", "le", "gt", "lt", "multiple_of", "min_length", "max_length") and not isinstance(
                    value, dict
                ):
                    foreign.append(f"{path}/{key}")
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}/{i}")

    walk(spec, "")
    assert foreign == []
    steps = spec["components"]["schemas"]["PromptRequest"]["properties"]["max_steps"]["anyOf"][0]
    assert (steps["minimum"], steps["maximum"]) == (1, 10_000)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_answers_by_its_spec(live: Served, mode: GenerationMode) -> None:
    """Each operation gets generated requests: valid ones (by the spec) and, in the negative mode, ones that
    break it. (Schemathesis's own pytest plugin does not load under this pytest, so hypothesis drives each
    operation's strategy here, as the plugin would.)"""
    api = schemathesis.openapi.from_url(live.url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) == sum(len(ops) for ops in api.raw_schema["paths"].values())
    if mode == GenerationMode.NEGATIVE:  # an operation that takes nothing has no input to break
        operations = [op for op in operations if list(op.iter_parameters()) or len(op.body)]
        assert len(operations) >= 20
    sid = _session_with_entries(live)
    answered: dict[str, set[int]] = {}
    # adding or starting an MCP server runs the command it names: never a generated one
    # (tests/server/test_mcp.py drives these two with real servers)
    operations = [op for op in operations if not (op.method == "post" and op.path.startswith("/mcp/servers"))]
    for operation in operations:
        strategy = operation.as_strategy(generation_mode=mode)
        if mode == GenerationMode.POSITIVE and "{session_id}" in operation.path and operation.method != "delete":
            # half the cases on a session that exists, so that the answers of success are checked too
            strategy = st.one_of(
                strategy, operation.as_strategy(generation_mode=mode, path_parameters={"session_id": sid})
            )

        check = _checker(strategy, live, answered.setdefault(operation.label, set()))
        try:
            check()
        except Exception as exc:
            raise AssertionError(f"{operation.label} ({mode.value}): {exc}") from exc
    succeeded = sorted(label for label, statuses in answered.items() if any(200 <= s < 300 for s in statuses))
    if mode == GenerationMode.POSITIVE:
        assert len(succeeded) >= 15, succeeded  # the schemas of success were checked, not only errors


def test_a_request_the_http_layer_cannot_parse_gets_its_plain_text_400(live: Served) -> None:
    """What the generated negative cases may send (a header value with a byte no header may hold): the HTTP
    layer answers 400 in plain text, as the spec states, and the check of errors takes it as such."""
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: " + host.encode() + b"\r\nX-Bad: a\x01b\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):  # the server closes a connection it could not parse
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    content_type = next(
        line.split(b":", 1)[1].strip().decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-type:")
    )
    assert content_type.startswith("text/plain")
    _typed_error(400, body, content_type)
    spec = requests.get(live.url + "/openapi.json", timeout=30).json()
    assert spec["paths"]["/health"]["get"]["responses"]["400"]["content"]["text/plain"]


def _checker(strategy: Any, live: Served, statuses: set[int]) -> Any:
    @given(case=strategy)
    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: Any) -> None:
        statuses.add(_check(case, live))

    return check


def _session_with_entries(live: Served) -> str:
    async def make() -> str:
        info = await live.state.store.create_session(directory=str(live.workspace), model="local/smollm2-135m")
        for i in range(5):
            await live.state.store.append(info.id, [Message.user(f"question {i}"), Message.assistant(f"answer {i}")])
        return info.id

    return str(live.call(make()))


def _check(case: Any, live: Served) -> int:
    if case.path.endswith("/events"):
        kwargs = case.as_transport_kwargs(base_url=live.url)
        with requests.request(**kwargs, stream=True, timeout=30) as response:
            assert response.status_code < 500
            if response.status_code == 200:
                assert response.headers["content-type"].startswith("text/event-stream")
            else:
                _typed_error(
                    response.status_code, next(response.iter_content(65536), b""), response.headers.get("content-type")
                )
            return int(response.status_code)
    response = case.call(base_url=live.url, timeout=60)
    case.validate_response(
        response,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )
    if response.status_code >= 400:
        _typed_error(response.status_code, response.content, response.headers.get("content-type"))
    return int(response.status_code)


def _typed_error(status: int, body: bytes, content_type: str | list[str] | None) -> None:
    assert 400 <= status < 500, status
    if isinstance(content_type, list):  # schemathesis' response: each header's values
        content_type = content_type[0] if content_type else None
    if status == 400 and (content_type or "").startswith("text/plain"):
        # a request the HTTP layer cannot parse (a generated header with a byte no header may hold): it answers
        # itself, in plain text, before any route (the spec's `openapi.HTTP_LAYER_400`)
        assert body.strip() and b"Traceback" not in body
        return
    error = json.loads(body)["error"]
    assert error["code"] and isinstance(error["code"], str) and error["message"]
    assert "Traceback" not in body.decode()


HERE = Path(__file__).resolve().parent
SEED = 24


def test_schemathesis_with_every_check_finds_nothing(tmp_path: Path) -> None:
    """Schemathesis as a user runs it, over every operation of the real server on loopback, with every check
    it has (`--checks all`: a 5xx, a status, header or body the spec does not list, an input the spec allows
    that the server refuses or one it forbids that the server takes, a 405 whose Allow leaves a method out,
    ...) and a fixed seed, through its phases (examples, coverage, fuzzing, stateful). The one exception is
    written in schemathesis.toml with its reason (an import whose document no schema can fully state); an
    MCP server it adds runs a harmless command (schemathesis_hooks.py)."""
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    assert cli is not None, "schemathesis is in the dev extra"
    with serve(tmp_path) as served:
        done = subprocess.run(
            [
                cli,
                "--config-file",
                str(HERE / "schemathesis.toml"),
                "run",
                served.url + "/openapi.json",
                "--checks",
                "all",
                "--seed",
                str(SEED),
                "--workers",
                "1",
                "--max-examples",
                "5",
                "--generation-database",
                "none",
                "--request-timeout",
                "10",
                "--no-color",
            ],
            env={**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks", "PYTHONPATH": _pythonpath()},
            cwd=HERE.parents[1],
            capture_output=True,
            text=True,
            timeout=900,
        )
    failures = done.stdout.find("FAILURES")
    report = (done.stdout[failures : failures + 40_000] if failures >= 0 else "") + done.stdout[-3_000:]
    report += done.stderr[-3_000:]
    assert done.returncode == 0, report
    tested = re.search(r"Tested: (\d+)", done.stdout)
    selected = re.search(r"Selected: (\d+)/(\d+)", done.stdout)
    assert tested and selected and int(tested.group(1)) == int(selected.group(2)), report  # every operation


def _pythonpath() -> str:
    return os.pathsep.join([str(HERE), *(p for p in sys.path if p)])


def test_the_served_spec_is_a_valid_openapi_document(live: Served) -> None:
    spec = requests.get(live.url + "/openapi.json", timeout=30).json()
    validate(spec)  # raises, saying where, on anything OpenAPI 3.1 does not allow
    run = spec["paths"]["/sessions/{session_id}/revert"]["post"]
    body = spec["components"]["schemas"][
        run["requestBody"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
    ]
    assert body["properties"]["to_seq"]["type"] == "integer"
    ref = next(p for p in run["parameters"] if p["name"] == "session_id")
    assert ref["schema"]["pattern"] == SESSION_REF
    create = spec["components"]["schemas"]["CreateSession"]["properties"]["directory"]
    assert create["pattern"] == ABSOLUTE_PATH
