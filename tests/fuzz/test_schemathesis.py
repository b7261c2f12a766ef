"""Schemathesis against the live gateway's `/openapi.json`: every REST operation, with valid
and invalid data. No response may be a 5xx, and each must conform to the document (status
code, content type, response schema), invalid input included. Path parameters
are often real ids (an agent, its blocks, a passage, tools) so the handlers behind the 404s
run too. The cases tried per operation are printed at the end."""

from __future__ import annotations

import itertools
import json
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks
from schemathesis.core import NOT_SET
from schemathesis.core.parameters import ParameterLocation

from tests.support.fault_providers import FaultLLM, Faults, install
from tests.support.gateway import make_settings, running_gateway
from voice_gateway import __version__
from voice_gateway.app import create_app
from voice_gateway.routes.openapi import openapi_document

EXAMPLES = 25  # per operation
CHECKS = [
    checks.not_a_server_error,  # no 5xx
    checks.status_code_conformance,  # no status the document does not list
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,  # data the document calls invalid is refused (4xx)
    checks.unsupported_method,  # a method the document lacks: 405 with an Allow header
]
SHOUT = '''def shout(text: str) -> str:
    """Say it loudly.

    Args:
        text: What to say.
    """
    return text.upper()
'''
SERIAL = itertools.count()
_SURROGATE_PAIR = re.compile(r"\\ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}")
TRIED: Counter[str] = Counter()
STATUSES: dict[str, Counter[int]] = {}


@dataclass
class Api:
    url: str
    http: httpx.Client
    ids: dict[str, list[str]] = field(default_factory=dict)

    def new_agent(self) -> str:
        resp = self.http.post("/v1/agents/", json={"model": "openai/fuzz", "name": "spare"})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def new_tool(self, name: str | None = None) -> str:
        name = name or f"shout_{next(SERIAL)}"
        resp = self.http.post("/v1/tools/", json={"source_code": SHOUT.replace("shout", name)})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def new_passage(self) -> str:
        agent = REAL["agent_id"][0]
        resp = self.http.post(f"/v1/agents/{agent}/archival-memory", json={"text": "A fact."})
        assert resp.status_code == 200, resp.text
        return str(resp.json()[0]["id"])


REAL: dict[str, list[str]] = {}  # path parameter -> real values, set by the fixture


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    faults = Faults()
    name = install(faults)
    db = tmp_path_factory.mktemp("schemathesis") / "vg.db"
    with (
        running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            stt=name,
            tts=name,
            sleeptime_model="scripted/demo",
            rate_limit_rps=0,
        ) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as http,
    ):
        srv.app.state.gw.llms.overrides["openai"] = FaultLLM(faults, reply="Okay.")  # type: ignore[attr-defined]
        api = Api(srv.url, http)
        REAL.update(agent_id=[api.new_agent()], label=["persona", "human"])
        builtin = [t["id"] for t in http.get("/v1/tools/").json()[:2]]
        REAL.update(passage_id=[api.new_passage()], tool_id=[api.new_tool("shout"), *builtin])
        yield api


def _document() -> dict[str, Any]:
    """The document the app serves at /openapi.json (test_served_document_is_the_one_tested
    checks that): built from the route table, so the operations are known at collection."""
    app = create_app(make_settings("sqlite+aiosqlite://", voice=True))
    return openapi_document(list(app.routes), __version__)


DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_rest_api(case: Any, api: Api) -> None:
    _use_real_ids(case, api)
    op = f"{case.method.upper()} {case.path}"
    TRIED[op] += 1
    response = case.call(base_url=api.url, timeout=30)
    STATUSES.setdefault(op, Counter())[response.status_code] += 1
    case.validate_response(response, checks=_checks(case))


def _use_real_ids(case: Any, api: Api) -> None:
    """Two cases in three name real things (agent, block label, passage, tool), so the
    handlers behind the 404s run; an agent-deleting case gets a fresh agent of its own."""
    pick = zlib.crc32(repr((case.path_parameters, case.query, case.body)).encode())
    if pick % 3 == 0:
        return
    for key in REAL.keys() & set(case.path_parameters or {}):
        case.path_parameters[key] = REAL[key][(pick // 3) % len(REAL[key])]
    if case.method.upper() == "DELETE":  # what a DELETE takes is made for it
        made = {
            "/v1/agents/{agent_id}": ("agent_id", api.new_agent),
            "/v1/tools/{tool_id}": ("tool_id", api.new_tool),
            "/v1/agents/{agent_id}/archival-memory/{passage_id}": ("passage_id", api.new_passage),
        }.get(case.path)
        if made is not None:
            case.path_parameters[made[0]] = made[1]()
    # what follows would make valid what was generated invalid on purpose: positive data only
    if case.path == "/v1/telephony/twilio/voice" and isinstance(case.query, dict):
        if not _negative(case, ParameterLocation.QUERY):
            case.query["agent_id"] = REAL["agent_id"][0]
    if _negative(case, ParameterLocation.BODY):
        return
    if case.path == "/v1/chat/completions" and isinstance(case.body, dict):
        case.body["model"] = REAL["agent_id"][0]
    # half of these also get a user message, so the turn runs with the other fields fuzzed
    said = case.path.endswith(("/messages", "/messages/stream", "/chat/completions"))
    if said and pick % 2 and isinstance(case.body, dict):
        messages = case.body.get("messages")
        case.body["messages"] = [*(messages if isinstance(messages, list) else [])]
        case.body["messages"].append({"role": "user", "content": "hello"})


def _checks(case: Any) -> list[Any]:
    """Every check; but "invalid data is refused" only for JSON bodies. In a query string a
    generated `tags=true` (a boolean where a list of strings is documented) or a dropped `null`
    arrives as valid text, so there the server cannot tell (test_hardened_edges.py tests the
    query parameters' strictness)."""
    other = (ParameterLocation.QUERY, ParameterLocation.PATH, ParameterLocation.HEADER)
    # and a generated string holding two lone surrogates that JSON joins into one character
    # (one character shorter on the server than the generator counted: a maxLength "violation")
    joined = (
        _SURROGATE_PAIR.search(json.dumps(case.body, default=str))
        if case.body is not NOT_SET
        else None
    )
    chosen = CHECKS
    if joined or any(_negative(case, where) for where in other):
        chosen = [c for c in chosen if c is not checks.negative_data_rejection]
    if "502" in case.operation.definition.raw.get("responses", {}):
        # the operation reaches a server the request named (an MCP server): its refusal is a
        # documented 502/504, not a server error of ours (any other 5xx still fails the
        # status check, which allows only the documented codes)
        chosen = [c for c in chosen if c is not checks.not_a_server_error]
    return chosen


def _negative(case: Any, location: ParameterLocation) -> bool:
    """Whether that part of the request was generated to violate the document."""
    info = case.meta.components.get(location) if case.meta is not None else None
    return info is not None and info.mode.is_negative


def test_findings_stay_fixed(api: Api) -> None:
    """What the REST fuzzing found (each a 500 before its fix)."""
    h, json_type = api.http, {"content-type": "application/json"}
    agent = api.new_agent()
    # JSON no Python decoder takes: lone surrogates (the error response crashed too), nesting
    # beyond the recursion limit, a number of 5000 digits; all 400, chat completions included
    for bad in ['{"tags": ["\\udfff"]}', '{"metadata": {"\\ud800": 1}}', "[" * 50_000, "9" * 5000]:
        for path in ("/v1/agents/", f"/v1/agents/{agent}/messages", "/v1/chat/completions"):
            resp = h.post(path, content=bad, headers=json_type)
            assert resp.status_code == 400, (path, bad[:20], resp.text)
            assert "malformed JSON body" in resp.text
    assert h.post("/v1/agents/", json={"name": "\U0001f600"}).status_code == 201  # a real pair
    # an int beyond SQLite's INTEGER
    resp = h.post("/v1/agents/", json={"context_window_limit": 10**24})
    assert resp.status_code == 422, resp.text
    # explicit nulls in a PATCH: "unchanged" for what cannot be empty, cleared otherwise
    before = h.get(f"/v1/agents/{agent}").json()
    nulls = dict.fromkeys(["name", "system", "model", "tags", "metadata", "voice_default"])
    resp = h.patch(f"/v1/agents/{agent}", json={**nulls, "greeting": None, "description": None})
    assert resp.status_code == 200, resp.text
    after = resp.json()
    assert {k: after[k] for k in nulls} == {k: before[k] for k in nulls}
    block = f"/v1/agents/{agent}/core-memory/blocks/persona"
    resp = h.patch(block, json={"limit": None, "read_only": None, "description": None})
    assert resp.status_code == 200 and resp.json()["limit"] == 5000, resp.text


def test_served_document_is_the_one_tested(api: Api) -> None:
    assert api.http.get("/openapi.json").json() == DOCUMENT


def test_print_counts() -> None:
    documented = {f"{m.upper()} {path}" for path, ms in DOCUMENT["paths"].items() for m in ms}
    probes = sum(n for op, n in TRIED.items() if op not in documented)
    total = sum(TRIED[op] for op in documented)
    print(f"\nschemathesis: {total} cases over {len(documented)} documented operations")
    for op in sorted(documented):
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(STATUSES.get(op, {}).items()))
        print(f"  {TRIED[op]:4}  {op:62} {statuses}")
    print(f"  and {probes} probes of undocumented methods (405/404)")
    assert all(TRIED[op] for op in documented), "an operation was never exercised"
    assert not any(code >= 500 for counts in STATUSES.values() for code in counts)
