"""The OpenAPI 3.1 document of /api/v1 (tests/portal keeps it and the routes in step)."""
from __future__ import annotations

from typing import Any

from lib.auth import acl

ERROR = {"$ref": "#/components/schemas/Error"}
PAGE = [{"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}},
        {"name": "per_page", "in": "query", "schema": {"type": "integer", "minimum": 1}}]
NAME = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
BROKER_ID = [{"name": "broker_id", "in": "path", "required": True,
              "schema": {"type": "integer", "minimum": 0}}]
TOPIC_BODY = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "partitions": {"type": "integer"},
    "stores": {"type": "integer"}, "durability": {"type": "string", "enum": ["sync", "async"]},
    "retention_ms": {"type": "integer"}, "retention_bytes": {"type": "integer"},
    "max_message_bytes": {"type": "integer"}, "replication_factor": {"type": "integer"},
    "min_insync_replicas": {"type": "integer"},
    "unclean_leader_election": {"type": "boolean"}}}
RESET_BODY = {"type": "object", "required": ["topic", "to"], "properties": {
    "topic": {"type": "string"},
    "to": {"type": "string", "enum": ["earliest", "latest", "offset", "time"]},
    "value": {"type": "string", "description": "the offset, or the time (ms or ISO, UTC)"},
    "partitions": {"type": "string", "description": "comma-separated; empty: all"},
    "dry_run": {"type": "boolean", "description": "preview the moves, change nothing"}}}
REPLAY_BODY = {"type": "object", "properties": {
    "to": {"type": "string", "description": "a topic; empty: each record's original topic"},
    "limit": {"type": "integer", "description": "at most this many (default all)"},
    "from_offset": {"type": "integer"}}}
MESSAGE = [{"name": k, "in": "path", "required": True, "schema": {"type": t}}
           for k, t in (("partition", "integer"), ("offset", "integer"))]
BROWSE = [{"name": k, "in": "query", "schema": s} for k, s in (
    ("mode", {"type": "string", "enum": ["newest", "range", "time"]}),
    ("partition", {"type": "string", "description": "a partition, or empty/all"}),
    ("from", {"type": "integer"}), ("to", {"type": "integer"}),
    ("time", {"type": "string", "description": "epoch ms or ISO 8601"}),
    ("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
    ("cursor", {"type": "string", "description": "partition:offset,... (next): from each "
                "offset on; in newest mode, below each offset"}),
    ("key", {"type": "string"}),
    ("key_match", {"type": "string", "enum": ["exact", "substring"]}),
    ("tag", {"type": "string"}), ("value", {"type": "string"}),
    ("format", {"type": "string", "enum": ["auto", "text", "json", "hex"]}),
    ("scan_bytes", {"type": "integer", "minimum": 1024, "maximum": 8 << 20}))]
PRODUCE_BODY = {"type": "object", "properties": {
    "value": {"type": "string"}, "value_base64": {"type": "string"}, "key": {"type": "string"},
    "tag": {"type": "string"}, "partition": {"type": "integer"}}}
STR = {"type": "string"}
USER_BODY = {"type": "object", "required": ["name"], "properties": {
    "name": STR, "password": {**STR, "minLength": 10, "maxLength": 1024},
    "roles": {"type": "array", "items": STR}, "service": {"type": "boolean"}}}
ROLES_BODY = {"type": "object", "required": ["roles"], "properties": {
    "roles": {"type": "array", "items": STR}}}
PASSWORD_BODY = {"type": "object", "required": ["password"], "properties": {
    "password": {**STR, "minLength": 10, "maxLength": 1024}}}
KEY_BODY = {"type": "object", "required": ["principal"], "properties": {
    "principal": STR, "description": {**STR, "maxLength": 200}}}
ACL_FIELDS = {
    "principal": STR, "operation": {"enum": list(acl.OPERATIONS)},
    "resource": {"enum": list(acl.RESOURCES)}, "name": STR,
    "pattern": {"enum": ["literal", "prefix"]}, "effect": {"enum": ["allow", "deny"]}}
ACL_BODY = {"type": "object", "required": ["principal", "operation", "resource"],
            "properties": ACL_FIELDS}
RATE = {"oneOf": [{"type": "integer"}, STR]}
QUOTA_BODY = {"type": "object", "properties": {"produce_bytes_per_s": RATE,
                                               "consume_bytes_per_s": RATE}}
IP_FIELDS = {"network": STR, "effect": {"enum": ["allow", "deny"]},
             "scope": {"enum": ["cluster", "topic"]}, "name": STR,
             "pattern": {"enum": ["literal", "prefix"]}}
IP_BODY = {"type": "object", "required": ["network"],
           "properties": {**IP_FIELDS, "force": {"type": "boolean"}}}


def _query(fields: dict[str, Any], required: tuple[str, ...] = ()) -> list[dict]:
    return [{"name": k, "in": "query", "required": k in required, "schema": v}
            for k, v in fields.items()]


USER = [{"name": "name", "in": "path", "required": True, "schema": STR}]
LOGIN_BODY = {"type": "object", "properties": {
    "user": {"type": "string"}, "password": {"type": "string"}, "api_key": {"type": "string"}}}

# (path, method, summary, parameters, request body schema or None, success status)
ROUTES: list[tuple[str, str, str, list, dict | None, str]] = [
    ("/login", "post", "Log in: a token for Authorization: Bearer (no cookie)", [],
     LOGIN_BODY, "200"),
    ("/openapi.json", "get", "This document", [], None, "200"),
    ("/whoami", "get", "The caller: principal, roles, via (session, token or api key), "
     "expires_ms (and, for a browser session, its CSRF token)", [], None, "200"),
    ("/overview", "get", "Dashboard: masters, brokers, topics, groups, alerts", [], None,
     "200"),
    ("/masters", "get", "Every master's role, term and lag", [], None, "200"),
    ("/brokers", "get", "Registered brokers", [], None, "200"),
    ("/brokers/{broker_id}", "get", "A broker with the partitions it hosts", BROKER_ID, None,
     "200"),
    ("/brokers/{broker_id}/drain", "post", "Drain a broker: no new partitions placed there "
     "and its replicas move to other brokers; admin only, idempotent", BROKER_ID, None, "200"),
    ("/brokers/{broker_id}/undrain", "post", "Undrain a broker: placement uses it again; admin "
     "only, idempotent", BROKER_ID, None, "200"),
    ("/topics", "get", "Topics: search (q), sort (name, partitions, durability, created; - "
     "for descending), pages",
     [{"name": "q", "in": "query", "schema": {"type": "string"}},
      {"name": "sort", "in": "query", "schema": {"type": "string"}}, *PAGE], None, "200"),
    ("/topics", "post", "Create a topic (unset settings take the master's defaults)", [],
     TOPIC_BODY, "201"),
    ("/topics/{name}", "get", "A topic with its partitions", NAME, None, "200"),
    ("/topics/{name}", "patch", "Change a topic's settings (partitions only grow; unset "
     "settings keep theirs)", NAME, {k: v for k, v in TOPIC_BODY.items() if k != "required"},
     "200"),
    ("/topics/{name}", "delete", "Delete a topic: confirm must repeat its name",
     [*NAME, {"name": "confirm", "in": "query", "required": True,
              "schema": {"type": "string"}}], None, "204"),
    ("/topics/{name}/messages", "get", "Browse messages: newest, an offset range or from a "
     "time; filtered by key, tag, value; bounded (limit, scan_bytes) with a next cursor",
     [*NAME, *BROWSE], None, "200"),
    ("/topics/{name}/messages", "post", "Produce a test message as the caller", NAME,
     PRODUCE_BODY, "201"),
    ("/topics/{name}/messages/{partition}/{offset}/raw", "get",
     "A message's value, raw (application/octet-stream)", [*NAME, *MESSAGE], None, "200"),
    ("/groups", "get", "Consumer groups", PAGE, None, "200"),
    ("/groups/{name}", "get", "A group: members, assignment, committed offsets and lag", NAME,
     None, "200"),
    ("/groups/{name}/reset", "post", "Reset a group's offsets of a topic (the group must "
     "have no live members); dry_run previews the moves", NAME, RESET_BODY, "200"),
    ("/groups/{name}/dead-letters", "get", "A group's dead letters (docs/retry.md): where "
     "each came from, its attempts and last error; the count",
     [*NAME, *({"name": k, "in": "query", "schema": {"type": "integer"}}
               for k in ("limit", "from_offset"))], None, "200"),
    ("/groups/{name}/dead-letters/replay", "post", "Publish a group's dead letters again, to "
     "their original topics or to one (audited)", NAME, REPLAY_BODY, "200"),
    ("/transactions", "get", "Transactions open or ending (all=1: every transactional_id "
     "kept), those the caller may describe: producer id, epoch, state, partitions, consumer "
     "offsets, age and timeout", [{"name": "all", "in": "query", "schema": {"type": "string"}}],
     None, "200"),
    ("/transactions/{tid}/abort", "post", "Abort a transactional_id's open transaction, "
     "fencing its producer (admin only)", [{"name": "tid", "in": "path", "required": True,
                                           "schema": {"type": "string"}}], None, "200"),
    ("/audit", "get", "Audit entries, newest first, filtered",
     [{"name": k, "in": "query", "schema": {"type": t}} for k, t in (
         ("principal", "string"), ("action", "string"), ("target", "string"),
         ("since_ms", "integer"), ("until_ms", "integer"), ("limit", "integer"))], None,
     "200"),
    # security (admins only: anyone else gets 403)
    ("/security/users", "get", "Users with their roles and API key counts; the known roles", [],
     None, "200"),
    ("/security/users", "post", "Add a user (password, roles) or a service account (service, "
     "no password); roles must be known", [], USER_BODY, "201"),
    ("/security/users/{name}", "get", "A user, its API keys and the ACL entries that apply to "
     "it (its own, its roles', everyone's)", USER, None, "200"),
    ("/security/users/{name}", "delete", "Delete a user and its API keys: confirm must repeat "
     "its name", [*USER, *_query({"confirm": STR}, ("confirm",))], None, "204"),
    ("/security/users/{name}/roles", "put", "Replace a user's roles (effective at its next "
     "login)", USER, ROLES_BODY, "200"),
    ("/security/users/{name}/password", "put", "Set a user's password", USER, PASSWORD_BODY,
     "204"),
    ("/security/api-keys", "get", "API keys (never their secrets), of one principal if given",
     _query({"principal": STR}), None, "200"),
    ("/security/api-keys", "post", "Create an API key: the answer holds the key, shown this "
     "once", [], KEY_BODY, "201"),
    ("/security/api-keys/{key_id}", "delete", "Revoke an API key",
     [{"name": "key_id", "in": "path", "required": True, "schema": STR}], None, "204"),
    ("/security/acls", "get", "ACL entries filtered by principal and name (substrings) and "
     "resource", _query({"principal": STR, "resource": ACL_FIELDS["resource"], "name": STR}),
     None, "200"),
    ("/security/acls", "post", "Add an ACL entry (200 and added false if it was there)", [],
     ACL_BODY, "201"),
    ("/security/acls", "delete", "Remove the ACL entry with exactly these fields",
     _query(ACL_FIELDS, ("principal", "operation", "resource")), None, "204"),
    ("/security/quotas", "get", "Quotas (bytes per second per user or group)", [], None, "200"),
    ("/security/quotas/{entity}", "put", "Set the quota of user:<name>, user:*, group:<name> "
     "or group:* (rates: integers or text such as 10MB; empty: no limit)",
     [{"name": "entity", "in": "path", "required": True, "schema": STR}], QUOTA_BODY, "200"),
    ("/security/quotas/{entity}", "delete", "Remove a quota",
     [{"name": "entity", "in": "path", "required": True, "schema": STR}], None, "204"),
    ("/security/ip-rules", "get", "IP allow and deny rules", [], None, "200"),
    ("/security/ip-rules", "post", "Add an IP rule (200 and added false if it was there; force: "
     "even if it shuts out the portal's address)", [], IP_BODY, "201"),
    ("/security/ip-rules", "delete", "Remove the IP rule with exactly these fields",
     _query(IP_FIELDS, ("network",)), None, "204"),
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
