"""The OpenAPI 3.1 document of /api/v1 (tests/portal keeps it and the routes in step)."""
from __future__ import annotations

from typing import Any

ERROR = {"$ref": "#/components/schemas/Error"}
PAGE = [{"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}},
        {"name": "per_page", "in": "query", "schema": {"type": "integer", "minimum": 1}}]
NAME = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
TOPIC_BODY = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "partitions": {"type": "integer"},
    "stores": {"type": "integer"}, "durability": {"type": "string", "enum": ["sync", "async"]},
    "retention_ms": {"type": "integer"}, "retention_bytes": {"type": "integer"},
    "max_message_bytes": {"type": "integer"}}}
LOGIN_BODY = {"type": "object", "properties": {
    "user": {"type": "string"}, "password": {"type": "string"}, "api_key": {"type": "string"}}}

# (path, method, summary, parameters, request body schema or None, success status)
ROUTES: list[tuple[str, str, str, list, dict | None, str]] = [
    ("/login", "post", "Log in: a token for Authorization: Bearer (no cookie)", [],
     LOGIN_BODY, "200"),
    ("/openapi.json", "get", "This document", [], None, "200"),
    ("/whoami", "get", "The caller (and, for a browser session, its CSRF token)", [], None,
     "200"),
    ("/overview", "get", "Dashboard: masters, brokers, topics, groups, alerts", [], None,
     "200"),
    ("/masters", "get", "Every master's role, term and lag", [], None, "200"),
    ("/brokers", "get", "Registered brokers", [], None, "200"),
    ("/topics", "get", "Topics: search (q), sort (name, partitions, durability, created; - "
     "for descending), pages",
     [{"name": "q", "in": "query", "schema": {"type": "string"}},
      {"name": "sort", "in": "query", "schema": {"type": "string"}}, *PAGE], None, "200"),
    ("/topics", "post", "Create a topic (unset settings take the master's defaults)", [],
     TOPIC_BODY, "201"),
    ("/topics/{name}", "get", "A topic with its partitions", NAME, None, "200"),
    ("/topics/{name}", "delete", "Delete a topic: confirm must repeat its name",
     [*NAME, {"name": "confirm", "in": "query", "required": True,
              "schema": {"type": "string"}}], None, "204"),
    ("/groups", "get", "Consumer groups", PAGE, None, "200"),
    ("/groups/{name}", "get", "A group: members, assignment, committed offsets and lag", NAME,
     None, "200"),
    ("/audit", "get", "Audit entries, newest first, filtered",
     [{"name": k, "in": "query", "schema": {"type": t}} for k, t in (
         ("principal", "string"), ("action", "string"), ("target", "string"),
         ("since_ms", "integer"), ("until_ms", "integer"), ("limit", "integer"))], None,
     "200"),
]


def document() -> dict[str, Any]:
    paths: dict[str, dict] = {}
    for path, method, summary, parameters, body, ok in ROUTES:
        operation: dict[str, Any] = {
            "summary": summary,
            "responses": {ok: {"description": "success"},
                          "default": {"description": "an error",
                                      "content": {"application/json": {"schema": ERROR}}}}}
        if parameters:
            operation["parameters"] = parameters
        if body is not None:
            operation["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": body}}}
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "tubeq portal API", "version": "1"},
        "servers": [{"url": "/api/v1"}],
        "paths": paths,
        "components": {
            "schemas": {"Error": {"type": "object", "properties": {"error": {
                "type": "object", "properties": {"status": {"type": "integer"},
                                                 "code": {"type": "string"},
                                                 "message": {"type": "string"}}}}}},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "Authorization",
                           "description": "ApiKey <key>"},
                "session": {"type": "apiKey", "in": "cookie", "name": "tubeq_session",
                            "description": "a browser session; changes need X-CSRF-Token"}}},
        "security": [{"bearer": []}, {"apiKey": []}, {"session": []}],
    }
