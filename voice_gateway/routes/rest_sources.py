"""Letta's `/v1/sources` family, which letta-client 1.7.x still calls: a source is a folder
(the same store, the same ids), so the folders' handlers answer where the two agree
(rest_folders.routes lists them); here are the reads only sources have (count, id by name,
metadata). The shared routes are listed in rest_folders.routes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from memory.files import FolderData
from memory.models import NotFound
from voice_gateway.gateway import gateway_of
from voice_gateway.routes.http import query_bool

ALL = 10_000  # a user's folders in one read (sources are listed unpaginated, as Letta does)


async def _folders(request: Request) -> list[FolderData]:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    rows: list[FolderData] = await gw.memory.folders.page(p.user_id, scoped=p.scoped, limit=ALL)
    return rows


async def count_sources(request: Request) -> JSONResponse:
    """Count the caller's sources (folders)."""
    return JSONResponse(len(await _folders(request)))


async def source_id_by_name(request: Request) -> JSONResponse:
    """The id of the caller's source (folder) with this name."""
    name = request.path_params["source_name"]
    for folder in await _folders(request):
        if folder.name == name:
            return JSONResponse(folder.id)
    raise NotFound("source", name)


async def sources_metadata(request: Request) -> JSONResponse:
    """Totals over the caller's sources: files and bytes, per source with
    `include_detailed_per_source_metadata=true` the files too."""
    gw = gateway_of(request)
    detailed = query_bool(request, "include_detailed_per_source_metadata", False)
    per_source = []
    for folder in await _folders(request):
        files = await gw.memory.files.page(folder.id, limit=ALL)
        per_source.append(
            {
                "source_id": folder.id,
                "source_name": folder.name,
                "file_count": len(files),
                "total_size": sum(x.file_size or 0 for x in files),
                "files": [
                    {"file_id": x.id, "file_name": x.file_name, "file_size": x.file_size}
                    for x in files
                ]
                if detailed
                else [],
            }
        )
    return JSONResponse(
        {
            "total_sources": len(per_source),
            "total_files": sum(s["file_count"] for s in per_source),
            "total_size": sum(s["total_size"] for s in per_source),
            "sources": per_source,
        }
    )


def routes() -> list[BaseRoute]:
    """The reads only sources have (the rest: rest_folders.routes)."""
    return [
        Route("/v1/sources/count", count_sources, methods=["GET"]),
        Route("/v1/sources/metadata", sources_metadata, methods=["GET"]),
        Route("/v1/sources/name/{source_name}", source_id_by_name, methods=["GET"]),
    ]
