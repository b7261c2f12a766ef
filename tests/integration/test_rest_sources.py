"""Letta's `/v1/sources` family (letta-client 1.7.x still calls it; 1.12.1 has only folders),
over raw HTTP: a source is a folder (same ids, same store), so a file uploaded through one
name is read through the other, an attached source shows in the agent's `sources`, and the
reads only sources have (count, id by name, metadata) answer. Unknown ids, another user's ids
and wrong types are the same errors as on folders."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from letta_client import Letta

from tests.integration.test_rest_conversations import make_user


@pytest.fixture
def srv(gateway_factory, sqlite_url: str):  # type: ignore[no-untyped-def]
    return gateway_factory(database_url=sqlite_url, api_key="server-secret")


@pytest.fixture
def keys(sqlite_url: str) -> tuple[str, str]:
    return make_user(sqlite_url, "alice"), make_user(sqlite_url, "bob")


def http(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture
def alice(srv, keys: tuple[str, str]) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with http(srv.url, keys[0]) as c:
        yield c


@pytest.fixture
def bob(srv, keys: tuple[str, str]) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with http(srv.url, keys[1]) as c:
        yield c


def done(c: httpx.Client, source_id: str, file_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120  # a poll, not a timing assertion
    while time.monotonic() < deadline:
        r = c.get(f"/v1/sources/{source_id}/files/{file_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        if body["processing_status"] in ("completed", "error"):
            return body
        time.sleep(0.3)
    raise AssertionError("file never finished processing")


def test_sources_are_folders(srv, alice: httpx.Client, keys: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    r = alice.post("/v1/sources/", json={"name": "manuals", "description": "how-tos"})
    assert r.status_code == 200, r.text
    source = r.json()
    sid = source["id"]
    assert alice.get(f"/v1/folders/{sid}").json()["name"] == "manuals"
    assert [s["id"] for s in alice.get("/v1/sources/").json()] == [sid]
    assert alice.get("/v1/sources/count").json() == 1
    assert alice.get("/v1/sources/name/manuals").json() == sid
    r = alice.patch(f"/v1/sources/{sid}", json={"description": "updated"})
    assert r.status_code == 200 and r.json()["description"] == "updated"

    text = b"The gate code is 4471.\n"
    r = alice.post(f"/v1/sources/{sid}/upload", files={"file": ("gate.txt", text, "text/plain")})
    assert r.status_code == 200, r.text
    fid = r.json()["id"]
    assert done(alice, sid, fid)["processing_status"] == "completed"
    # the same file uploaded again: a unique name, the original name kept
    r = alice.post(f"/v1/sources/{sid}/upload", files={"file": ("gate.txt", text, "text/plain")})
    again = r.json()
    assert (again["file_name"], again["original_file_name"]) == ("gate_(1).txt", "gate.txt")
    files = alice.get(f"/v1/sources/{sid}/files").json()
    assert {f["id"] for f in files} == {fid, again["id"]}
    meta = alice.get("/v1/sources/metadata?include_detailed_per_source_metadata=true").json()
    assert (meta["total_sources"], meta["total_files"]) == (1, 2)
    assert meta["total_size"] == 2 * len(text)
    assert {f["file_name"] for f in meta["sources"][0]["files"]} == {"gate.txt", "gate_(1).txt"}

    client = Letta(base_url=srv.url, api_key=keys[0], timeout=60, _strict_response_validation=True)
    agent = client.agents.create(model="openai/fake", name="gatekeeper")
    r = alice.patch(f"/v1/agents/{agent.id}/sources/attach/{sid}")
    assert r.status_code == 200, r.text
    assert [s["id"] for s in r.json()["sources"]] == [sid]
    files_core = {t["name"] for t in r.json()["tools"] if t["tool_type"] == "letta_files_core"}
    assert files_core == {"open_files", "grep_files", "semantic_search_files"}
    assert [s["id"] for s in alice.get(f"/v1/agents/{agent.id}/sources").json()] == [sid]
    assert alice.get(f"/v1/sources/{sid}/agents").json() == [agent.id]
    strict = client.agents.retrieve(agent.id)  # the strict client parses `sources`
    assert [s.id for s in strict.sources] == [sid]
    born = alice.post("/v1/agents", json={"model": "openai/fake", "source_ids": [sid]}).json()
    assert [s["id"] for s in born["sources"]] == [sid]  # Letta's source_ids on create
    assert "open_files" in {t["name"] for t in born["tools"]}
    assert alice.delete(f"/v1/agents/{born['id']}").status_code in (200, 204)
    r = alice.patch(f"/v1/agents/{agent.id}/sources/detach/{sid}")
    assert r.status_code == 200 and r.json()["sources"] == []
    assert not [t for t in r.json()["tools"] if t["tool_type"] == "letta_files_core"]

    assert alice.delete(f"/v1/sources/{sid}/{again['id']}").status_code == 204
    assert [f["id"] for f in alice.get(f"/v1/folders/{sid}/files").json()] == [fid]
    assert alice.delete(f"/v1/sources/{sid}").status_code == 200
    assert alice.get(f"/v1/sources/{sid}").status_code == 404
    assert alice.get("/v1/sources/count").json() == 0
    # over the 1 MB JSON body limit: a file upload has its own limit (VG_MAX_FILE_BYTES)
    big = b"".join(b"line %d of a long manual\n" % n for n in range(60_000))
    assert len(big) > 1_500_000
    other = alice.post("/v1/sources/", json={"name": "big"}).json()["id"]
    r = alice.post(f"/v1/sources/{other}/upload", files={"file": ("big.txt", big, "text/plain")})
    assert r.status_code == 200, r.text
    assert r.json()["file_size"] == len(big)  # accepted; processed in the background


def test_sources_bad_input(alice: httpx.Client, bob: httpx.Client) -> None:
    sid = alice.post("/v1/sources", json={"name": "private"}).json()["id"]
    up = alice.post(f"/v1/sources/{sid}/upload", files={"file": ("a.txt", b"a\n", "text/plain")})
    fid = up.json()["id"]
    agent = bob.post("/v1/agents", json={"model": "openai/fake"}).json()["id"]
    # unknown ids, and alice's ids with bob's key: the same 404 with a JSON detail
    for who, source, file in ((alice, "source-nope", fid), (bob, sid, fid), (alice, sid, "file-x")):
        for method, path in (
            ("GET", f"/v1/sources/{source}/files/{file}"),
            ("DELETE", f"/v1/sources/{source}/{file}"),
        ):
            r = who.request(method, path)
            assert r.status_code == 404 and "detail" in r.json(), (method, path, r.text)
    for method, path in (
        ("GET", f"/v1/sources/{sid}"),
        ("PATCH", f"/v1/sources/{sid}"),
        ("DELETE", f"/v1/sources/{sid}"),
        ("GET", f"/v1/sources/{sid}/files"),
        ("GET", f"/v1/sources/{sid}/agents"),
        ("POST", f"/v1/sources/{sid}/upload"),
        ("PATCH", f"/v1/agents/{agent}/sources/attach/{sid}"),
        ("GET", "/v1/sources/name/private"),
    ):
        r = bob.request(method, path, json={} if method == "PATCH" else None)
        assert r.status_code == 404 and "detail" in r.json(), (method, path, r.text)
    r = bob.post("/v1/agents", json={"model": "openai/fake", "source_ids": [sid]})
    assert r.status_code == 404 and "detail" in r.json()  # alice's source, bob's key
    r = alice.post("/v1/agents", json={"model": "openai/fake", "source_ids": "source-x"})
    assert r.status_code == 422 and "detail" in r.json()
    assert bob.get("/v1/sources/count").json() == 0
    assert bob.get("/v1/sources/metadata").json()["total_sources"] == 0
    # wrong types
    for body in ({"name": 5}, {"name": "x", "embedding_chunk_size": "big"}, {}):
        r = alice.post("/v1/sources/", json=body)
        assert r.status_code in (400, 422) and "detail" in r.json(), (body, r.text)
    r = alice.patch(f"/v1/sources/{sid}", json={"description": ["not", "text"]})
    assert r.status_code == 422 and "detail" in r.json()
    r = alice.get(f"/v1/sources/{sid}/files?limit=many")
    assert r.status_code == 422 and "detail" in r.json()
    r = alice.get("/v1/sources/metadata?include_detailed_per_source_metadata=maybe")
    assert r.status_code == 422 and "detail" in r.json()
