"""`gpuledger serve`: one web application and API over the store, for finance, customers
and operators (docs/serve.md).

    app.py      the ASGI app: routes, security headers, errors as one line of JSON
    access.py   who is asking (bearer tokens, ledger/tokens.py) and which tenant they read
    api.py      /api/v1: the commands' JSON documents, scoped to the caller
    collect.py  POST /api/v1/events: CloudEvents over HTTP through one writer
    metrics.py  /metrics in the Prometheus text format
    pages.py    server-rendered pages (templates/, static/)
"""

from reconcile.serve.app import create_app

__all__ = ["create_app"]
