"""`GET /api/v1/openapi.json`: the API described as OpenAPI 3.1, and
`GET /api/v1/schemas/{name}.json`: the JSON Schemas of the documents it returns
(schemas/json/documents/, written by `make schemas` from schemas/documents/), which the
OpenAPI document's responses reference. Neither needs a token: they describe shapes, never
data."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from schemas.documents import DOCUMENTS
from schemas.documents.reports import REPORT_DOCUMENTS

_SCHEMAS = Path(str(resources.files("schemas"))) / "json" / "documents"
#: each report's document, by report name (serving is outcomes' view)
_REPORT_SCHEMA = {
    report: next(name for name, model in DOCUMENTS.items() if model is kind)
    for report, kind in REPORT_DOCUMENTS.items()
}


def schema_ref(name: str) -> dict[str, str]:
    """A reference to document `name`'s JSON Schema, as this server serves it."""
    return {"$ref": f"/api/v1/schemas/{name}.json"}


def _json(schema: dict[str, Any] | None) -> dict[str, Any]:
    return {"application/json": {"schema": schema} if schema else {}}


_TENANT = {
    "name": "tenant",
    "in": "query",
    "required": False,
    "schema": {"type": "string"},
    "description": "operators: one tenant (default: all); a tenant token reads its own",
}
_ERROR = {
    "description": "no valid token (401) or a role that may not use the route (403)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


_BAD = {
    "description": "a parameter is wrong: the message names it and what it takes",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _get(
    summary: str,
    params: list[dict[str, Any]] | None = None,
    roles: str = "operator, tenant",
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "description": f"Roles: {roles}.",
            "parameters": params or [],
            "responses": {
                "200": {"description": "the document", "content": _json(schema)},
                "400": _BAD,
                "401": _ERROR,
                "403": _ERROR,
            },
        }
    }


def _query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema or {"type": "string"},
        "description": description,
    }


def _filters() -> list[dict[str, Any]]:
    """The list filters (reconcile/serve/filters.py)."""
    from reconcile.engine.rules import BEARERS, CATEGORY_ORDER
    from reconcile.serve.filters import CLASSES

    time = {"type": "string", "format": "date-time"}
    return [
        _TENANT,
        _query("invoice", "one invoice's only"),
        _query("period", "a UTC month, YYYY-MM (a line by its period's start)"),
        _query("since", "from this time, included", time),
        _query("until", "to this time, excluded", time),
        _query("class", "a placement class", {"enum": list(CLASSES)}),
        _query("category", "a category of RULES.md", {"enum": list(CATEGORY_ORDER)}),
        _query("bearer", "who bears it", {"enum": list(BEARERS)}),
        _query("page", "the page, from 1", {"type": "integer", "minimum": 1}),
    ]


def document() -> dict[str, Any]:
    time = {"type": "string", "format": "date-time"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gpuledger",
            "version": "1",
            "description": "The evidence ledger and reconciliation of rented GPU compute.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {"error": {"type": "string"}},
                    "required": ["error"],
                }
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/whoami": _get("The caller's role", roles="any"),
            "/api/v1/tenants": _get(
                "The tenants the caller may read, a page at a time",
                [_query("page", "the page, from 1", {"type": "integer", "minimum": 1})],
            ),
            "/api/v1/reconciliation": _get(
                "What every billed GPU-second was (reconcile --format json)",
                [_TENANT, {"name": "invoice", "in": "query", "schema": {"type": "string"}}],
                schema=schema_ref("reconciliation"),
            ),
            "/api/v1/lines": _get(
                "The reconciled lines, filtered, a page at a time",
                _filters(),
                schema=schema_ref("serve.lines"),
            ),
            "/api/v1/findings": _get(
                "The findings (each cell not the customer's, with the entries it cites), "
                "filtered, a page at a time",
                _filters(),
                schema=schema_ref("serve.findings"),
            ),
            "/api/v1/disputes/{invoice}": _get(
                "The signed dispute packet of one invoice (dispute)",
                [
                    {"name": "invoice", "in": "path", "required": True, "schema": {}},
                    _TENANT,
                ],
                schema=schema_ref("dispute-packet"),
            ),
            "/api/v1/dispute": _get(
                "The signed dispute packet of one invoice, named in the query string "
                "(any id, '/' included)",
                [_query("invoice", "the invoice"), _TENANT],
                schema=schema_ref("dispute-packet"),
            ),
            "/api/v1/schemas/{name}": {
                "get": {
                    "summary": "A document's JSON Schema (no token needed)",
                    "parameters": [
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"enum": [f"{n}.json" for n in DOCUMENTS]},
                        }
                    ],
                    "security": [],
                    "responses": {"200": {"description": "the schema", "content": _json(None)}},
                }
            },
            "/api/v1/openapi.json": {
                "get": {
                    "summary": "This document (no token needed)",
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3.1", "content": _json(None)}},
                }
            },
            "/api/v1/reports/{name}": _get(
                "One report (report NAME --format json)",
                [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {
                            "enum": [
                                "promises",
                                "capacity",
                                "outcomes",
                                "serving",
                                "placement",
                                "envelope",
                            ]
                        },
                    },
                    _TENANT,
                    {"name": "since", "in": "query", "schema": time},
                    {"name": "until", "in": "query", "schema": time},
                    {
                        "name": "by",
                        "in": "query",
                        "schema": {"enum": ["both", "source", "placement_class"]},
                    },
                ],
                schema={"anyOf": [schema_ref(n) for n in sorted(set(_REPORT_SCHEMA.values()))]},
            ),
            "/api/v1/entries/{seq}": _get(
                "One entry as stored, with its inclusion proof",
                [
                    {
                        "name": "seq",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 1},
                    }
                ],
            ),
            "/api/v1/events": {
                "post": {
                    "summary": "Append CloudEvents (HTTP binding: structured or batch mode)",
                    "description": "Roles: collector (under its own source), operator.",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/cloudevents+json": {"schema": {"type": "object"}},
                            "application/cloudevents-batch+json": {"schema": {"type": "array"}},
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "each event appended, duplicate or quarantined",
                            "content": {"application/json": {}},
                        },
                        "400": _ERROR,
                        "401": _ERROR,
                        "403": _ERROR,
                        "413": _ERROR,
                        "415": _ERROR,
                    },
                }
            },
        },
    }


async def endpoint(request: Request) -> Response:
    return JSONResponse(document())


async def schema(request: Request) -> Response:
    """One document's JSON Schema, by its file name; only the documents' own names are
    served (the name is looked up, never joined to a path as given)."""
    name = request.path_params["name"]
    found = {f"{n}.json" for n in DOCUMENTS}
    if name not in found:
        raise HTTPException(404, "no such schema")
    return Response((_SCHEMAS / name).read_bytes(), media_type="application/schema+json")


def routes() -> list[Route]:
    return [
        Route("/api/v1/openapi.json", endpoint),
        Route("/api/v1/schemas/{name}", schema),
    ]
