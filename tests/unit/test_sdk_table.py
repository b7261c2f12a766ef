"""The "Served and not served" table of docs/rest_api.md names every method of letta-client
1.12.1 once, no method the SDK lacks, and says "yes" exactly where the gateway has a route for
the method's HTTP call (and "no" where it has none)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from letta_client import Letta
from letta_client._resource import SyncAPIResource
from starlette.routing import Route

from voice_gateway.app import routes
from voice_gateway.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "rest_api.md"
SECTION = "## Served and not served"
CALL = re.compile(
    r"self\._?(get|post|patch|put|delete|get_api_list)\(\s*(?:path_template\()?\s*f?\"([^\"]+)\""
)
ROW = re.compile(r"^\| `([a-z_.]+)` \| `([A-Z]+) ([^`]+)` \| (yes|no) \|")


def sdk_methods() -> dict[str, tuple[str, str]]:
    """Every public method of every sync resource reachable from the client, by dotted name
    (`agents.messages.create`), with the HTTP method and path it calls."""
    client = Letta(base_url="http://127.0.0.1:9", api_key="unused")
    out: dict[str, tuple[str, str]] = {}

    def walk(obj: object, prefix: str) -> None:
        for name, attr in inspect.getmembers(type(obj)):
            if name.startswith("_") or name.startswith("with_"):
                continue
            if not inspect.isfunction(attr) or not isinstance(obj, SyncAPIResource):
                child = getattr(obj, name)
                if isinstance(child, SyncAPIResource):
                    walk(child, f"{prefix}{name}.")
                continue
            match = CALL.search(inspect.getsource(attr))
            assert match, f"{prefix}{name}: no HTTP call found in its source"
            verb = {"get_api_list": "get"}.get(match[1], match[1]).upper()
            out[f"{prefix}{name}"] = (verb, match[2])

    walk(client, "")
    # The one method on the client itself.
    match = CALL.search(inspect.getsource(Letta.health))
    assert match
    out["health"] = (match[1].upper(), match[2])
    return out


def table_rows() -> dict[str, tuple[str, str, bool]]:
    text = DOC.read_text()
    assert SECTION in text
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str, bool]] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            assert match[1] not in rows, f"{match[1]} is in the table twice"
            rows[match[1]] = (match[2], match[3], match[4] == "yes")
    return rows


def served(verb: str, path: str) -> bool:
    concrete = re.sub(r"\{[^}]+\}", "some-id", path)
    for route in routes(Settings(voice=False)):
        if isinstance(route, Route) and route.methods and verb in route.methods:
            if route.path_regex.fullmatch(concrete):
                return True
    return False


def test_sdk_enumeration_finds_the_known_surface() -> None:
    methods = sdk_methods()
    assert methods["agents.messages.create"] == ("POST", "/v1/agents/{agent_id}/messages")
    assert methods["templates.agents.create"][0] == "POST"
    assert len(methods) > 120


def test_table_names_every_sdk_method_and_no_other() -> None:
    methods, rows = sdk_methods(), table_rows()
    missing = sorted(set(methods) - set(rows))
    unknown = sorted(set(rows) - set(methods))
    assert not missing, f"docs/rest_api.md lacks rows for {missing}"
    assert not unknown, f"docs/rest_api.md names methods letta-client lacks: {unknown}"


@pytest.mark.parametrize("name", sorted(table_rows()))
def test_each_row_matches_the_sdk_call_and_the_routes(name: str) -> None:
    verb, path, says_served = table_rows()[name]
    assert (verb, path) == sdk_methods()[name], f"{name}: the row's route is not the SDK's"
    assert served(verb, path) == says_served, f"{name}: the table says served={says_served}"
