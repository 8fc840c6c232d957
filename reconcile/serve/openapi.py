"""`GET /api/v1/openapi.json`: the API described as OpenAPI 3.1 (no token needed: it
describes routes, never data)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

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


def _get(
    summary: str, params: list[dict[str, Any]] | None = None, roles: str = "operator, tenant"
) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "description": f"Roles: {roles}.",
            "parameters": params or [],
            "responses": {
                "200": {"description": "the document", "content": {"application/json": {}}},
                "401": _ERROR,
                "403": _ERROR,
            },
        }
    }


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
            "/api/v1/tenants": _get("The tenants the caller may read"),
            "/api/v1/reconciliation": _get(
                "What every billed GPU-second was (reconcile --format json)",
                [_TENANT, {"name": "invoice", "in": "query", "schema": {"type": "string"}}],
            ),
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
