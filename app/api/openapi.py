"""`GET /api/v1/openapi.json`: the API described in OpenAPI 3.1, written
here beside the routes (tests/test_openapi.py fails when a route is added
without its entry or an entry outlives its route; schemathesis checks the
answers of the real server against it in `make test`)."""
from __future__ import annotations

from flask import jsonify

from divergent.app.api import bp
from divergent.app.models import RUN_STATUSES
from divergent.app.services.runs.interactive import KINDS

STRING, INTEGER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
OBJECT = {"type": "object"}
TIME = {"type": "string", "format": "date-time"}


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: dict) -> dict:
    return {"type": "array", "items": items}


def obj(**properties) -> dict:
    """An object that always has these keys (it may have more)."""
    return {"type": "object", "required": list(properties), "properties": properties}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


DOLLARS = {"type": "string", "pattern": r"^\d+(\.\d+)?$", "description": "US dollars"}
FRACTION = nullable({"type": "number", "minimum": 0, "maximum": 1})
USAGE = obj(cpu_efficiency=FRACTION, max_memory_bytes=nullable(INTEGER),
            memory_requested_bytes=INTEGER, gpu_utilization=FRACTION,
            gpu_memory_max_bytes=nullable(INTEGER), gpu_note=nullable(STRING),
            source=nullable({"enum": ["sampler", "slurm"]}))
RUN = obj(
    name=STRING, project=STRING, user=STRING, status={"enum": list(RUN_STATUSES)},
    kind={"enum": list(KINDS)}, url=nullable(STRING), exit_code=nullable(INTEGER),
    waiting=nullable(STRING), gpu=STRING, gpus=INTEGER,
    cpu=INTEGER, memory=INTEGER, image=STRING, command=STRING,
    env={"type": "object", "additionalProperties": STRING}, secrets=array(STRING),
    code=nullable(STRING), created_at=TIME, started_at=nullable(TIME), ended_at=nullable(TIME),
    duration=nullable(INTEGER), rate=DOLLARS, cost=DOLLARS, max_spend=nullable(DOLLARS),
    time_limit_minutes=nullable(INTEGER), metrics=OBJECT, metrics_points=INTEGER,
    metrics_malformed=INTEGER, checks=array(obj(check=STRING, verdict=nullable(STRING), value={})),
    usage=USAGE, allow_idle=BOOLEAN,
    slurm_job_id=nullable(STRING), restarts=INTEGER, mounts=array(OBJECT),
    sweep=nullable(STRING), sweep_index=nullable(INTEGER), sweep_values=nullable(OBJECT),
    schedule=nullable(STRING))
RUN_REQUEST: dict = {"type": "object", "required": ["command"], "properties": {
    "project": STRING, "command": STRING, "gpu": STRING, "gpus": INTEGER,
    "cpu": nullable(INTEGER), "memory": nullable(INTEGER), "max_spend": nullable(STRING),
    "name": nullable(STRING), "image": STRING, "env": {"type": "object", "additionalProperties": STRING},
    "secrets": array(STRING), "checks": array(STRING), "telemetry": nullable(STRING),
    "code": nullable(STRING), "mounts": array(STRING),
    "kind": {"enum": list(KINDS), "description": "batch (div run), shell (div shell) or "
             "notebook (div notebook)"},
    "allow_idle": {**BOOLEAN, "description": "the site's idle policy leaves it alone"}}}
SWEEP_REQUEST = {**RUN_REQUEST, "required": ["command", "sweep"], "properties": {
    **RUN_REQUEST["properties"], "sweep": {"type": "object", "additionalProperties": array(STRING)}}}
TRANSFER_REQUEST = obj(direction={"enum": ["import", "export"]}, volume=STRING, url=STRING) | {
    "properties": {"direction": {"enum": ["import", "export"]}, "volume": STRING, "path": STRING,
                   "url": STRING, "max_spend": nullable(STRING)}}
SWEEP = obj(name=STRING, size=INTEGER, axes=OBJECT, slurm_job_id=nullable(STRING),
            status=STRING, ended=INTEGER, succeeded=INTEGER, cost=DOLLARS, runs=array(ref("Run")))
SCHEDULE = obj(name=STRING, cron=STRING, tz=STRING, when=STRING, command=STRING,
               next_at=nullable(TIME), last_run=nullable(STRING), last_error=nullable(STRING))
CHANNEL = obj(id=INTEGER, kind={"enum": ["webhook", "email"]}, target=STRING, on=array(STRING),
              schedule=nullable(STRING), last_delivery_at=nullable(TIME),
              last_error=nullable(STRING))
ENTRY = obj(path=STRING, type={"enum": ["file", "dir"]}, size=INTEGER, mtime={"type": "number"})
CREATED_RUN = obj(run=ref("Run"), header=STRING)

SCHEMAS = {"Error": obj(error=STRING), "Run": RUN, "RunRequest": RUN_REQUEST, "Sweep": SWEEP,
           "Schedule": SCHEDULE, "Channel": CHANNEL, "Entry": ENTRY, "CreatedRun": CREATED_RUN}


def json_body(schema: dict) -> dict:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def bytes_body(*media: str) -> dict:
    binary = {"schema": {"type": "string", "format": "binary"}}
    return {"required": True, "content": {kind: binary for kind in media}}


def answer(schema: dict, media: str = "application/json") -> dict:
    return {"description": "OK", "content": {media: {"schema": schema}}}


def query(name: str, schema: dict, description: str = "") -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def op(summary: str, ok: dict, status: str = "200", body: dict | None = None,
       params: list | None = None, public: bool = False, **more: dict) -> dict:
    """One operation: its answer, and any error as {"error": message}."""
    operation = {"summary": summary, "responses": {status: ok, **more, "default": {
        "description": "An error: what was wrong, in words",
        "content": {"application/json": {"schema": ref("Error")}}}}}
    if body is not None:
        operation["requestBody"] = body
    if params:
        operation["parameters"] = params
    if public:
        operation["security"] = []
    return operation


OK = answer(obj(ok={"const": True}))
RUN_ANSWER = answer(obj(run=ref("Run"), summary=nullable(STRING)))
DELETED = answer(obj(deleted={}))
PATH = query("path", STRING, "a path inside the volume (a folder's or a file's)")
IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{16,64}$"}}
RETRIED: dict = {"200": answer(ref("CreatedRun")) | {"description": "a retry: the run the key made"}}

PATHS = {
    "/openapi.json": {"get": op("This description (no key needed)", answer(OBJECT), public=True)},
    "/health": {"get": op("Whether the server answers (no key needed)",
                          answer(obj(ok={"const": True})), public=True)},
    "/auth/device": {"post": op(
        "Start `div login --sso`: a code to enter at the site's sign-in provider (no key "
        "needed; 404 where the site has no single sign-on)",
        answer(obj(device_code=STRING, user_code=STRING, verification_uri=STRING)),
        public=True)},
    "/auth/device/token": {"post": op(
        "An API key once the user signed in at the provider (202 until then)",
        answer(obj(key=STRING, user=STRING, org=STRING, role=STRING)), public=True,
        body=json_body(obj(device_code=STRING)),
        **{"202": answer(obj(pending={"const": True}, interval=INTEGER))})},  # type: ignore[arg-type]
    "/whoami": {"get": op("The key's user, org, role and prefix",
                          answer(obj(user=STRING, org=STRING, role=STRING, key=STRING)))},
    "/catalog": {"get": op("The site's GPU types, node shapes and prices", answer(OBJECT))},
    "/code/trees": {"post": op(
        "A code tree: the blobs still missing, or once all are there its ref",
        answer({"anyOf": [obj(missing=array(STRING)),
                          obj(ref=STRING, files=INTEGER, bytes=INTEGER)]}),
        body=json_body(obj(volume=STRING, files=array(OBJECT))))},
    "/code/blobs/{sha}": {"put": op("One blob, checked against its sha256 (at most 256 MB)",
                                    answer(obj(stored=STRING)), "201",
                                    body=bytes_body("application/octet-stream"))},
    "/runs": {
        "get": op("The org's runs, newest first", answer(obj(runs=array(ref("Run")))), params=[
            query("limit", {"type": "integer", "minimum": 1}), query("project", STRING),
            query("status", {"enum": list(RUN_STATUSES)}), query("user", STRING, "a username"),
            query("mine", {"enum": ["0", "1", "true", "false"]}, "the key's user's runs")]),
        "post": op("Start a run", answer(ref("CreatedRun")), "201", json_body(ref("RunRequest")),
                   [IDEMPOTENCY], **RETRIED)},
    "/runs/check": {"post": op("Whether POST /runs would take this run", OK,
                               body=json_body(ref("RunRequest")))},
    "/runs/{name}": {"get": op("A run and its last line", RUN_ANSWER)},
    "/runs/{name}/stop": {"post": op("Stop a run", answer(obj(run=ref("Run"), stopping=BOOLEAN)))},
    "/runs/{name}/rerun": {"post": op("A new run of what this run ran", answer(ref("CreatedRun")),
                                      "201", params=[IDEMPOTENCY], **RETRIED)},
    "/runs/{name}/logs": {"get": op(
        "The log as NDJSON events (docs/users/api.md: the log stream)",
        answer({"type": "string"}, "application/x-ndjson"), params=[
            query("stdout", {"type": "integer", "minimum": 0}, "byte offset"),
            query("stderr", {"type": "integer", "minimum": 0}, "byte offset"),
            query("tail", {"type": "integer", "minimum": 1}, "each stream's last N lines"),
            query("follow", {"enum": ["0", "1", "true"]}, "stream until the run ends")])},
    "/transfers": {"post": op("Copy between S3 and a volume, as a run",
                              answer(ref("CreatedRun")), "201", json_body(TRANSFER_REQUEST),
                              [IDEMPOTENCY], **RETRIED)},
    "/transfers/check": {"post": op("Whether POST /transfers would take it", OK,
                                    body=json_body(TRANSFER_REQUEST))},
    "/sweeps": {
        "get": op("The org's sweeps, newest first", answer(obj(sweeps=array(ref("Sweep")))),
                  params=[query("limit", {"type": "integer", "minimum": 1})]),
        "post": op("Start a sweep: one run per combination, one Slurm job array",
                   answer(obj(sweep=ref("Sweep"))), "201", json_body(SWEEP_REQUEST), [IDEMPOTENCY],
                   # mypy cannot know that a status code names none of op's parameters.
                   **{"200": answer(obj(sweep=ref("Sweep")))})},  # type: ignore[arg-type]
    "/sweeps/check": {"post": op("Whether POST /sweeps would take it", OK,
                                 body=json_body(SWEEP_REQUEST))},
    "/sweeps/{name}": {"get": op("A sweep and its runs", answer(obj(sweep=ref("Sweep"))))},
    "/schedules": {
        "get": op("The org's schedules", answer(obj(schedules=array(ref("Schedule"))))),
        "post": op("Make a schedule", answer(obj(schedule=ref("Schedule"))), "201", json_body(
            obj(cron=STRING, run=ref("RunRequest")) | {"properties": {
                "cron": STRING, "tz": STRING, "name": nullable(STRING),
                "run": ref("RunRequest")}}))},
    "/schedules/check": {"post": op("Whether POST /schedules would take it", OK, body=json_body(
        obj(cron=STRING, run=ref("RunRequest"))))},
    "/schedules/{name}": {"delete": op("Remove a schedule", DELETED)},
    "/notifications": {
        "get": op("The org's notification channels", answer(obj(channels=array(ref("Channel"))))),
        "post": op("Add a channel", answer(obj(channel=ref("Channel"))), "201", json_body(
            {"type": "object", "properties": {"webhook": STRING, "email": STRING,
                                              "on": array(STRING), "schedule": nullable(STRING)}}))},
    "/notifications/{channel_id}": {"delete": op("Remove a channel", DELETED)},
    "/keys": {
        "get": op("Your API keys (?all=1: the org's, for its admins)", answer(obj(keys=array(obj(
            prefix=STRING, name=STRING, user=STRING, created_at=TIME,
            last_used_at=nullable(TIME), revoked_at=nullable(TIME), expires_at=nullable(TIME),
            current=BOOLEAN)))), params=[query("all", {"enum": ["1", "true"]})]),
        "post": op("A new key, shown once", answer(obj(key=STRING, prefix=STRING)), "201",
                   json_body({"type": "object", "properties": {
                       "name": STRING, "expires_in_days": nullable(INTEGER)}}))},
    "/keys/{prefix}": {"delete": op("Revoke a key", answer(obj(revoked=STRING)))},
    "/secrets": {"get": op("The org's secrets: names, who set them and when", answer(obj(
        secrets=array(obj(name=STRING, set_by=STRING, set_at=TIME)))))},
    "/secrets/{name}": {
        "put": op("Set a secret", answer(obj(secret=obj(name=STRING, set_by=STRING, set_at=TIME))),
                  body=json_body(obj(value=STRING))),
        "delete": op("Remove a secret", DELETED)},
    "/usage": {"get": op("The org's spend in a month, by project and GPU type", answer(obj(
        month=STRING, spent=DOLLARS, limit=nullable(DOLLARS), left=nullable(DOLLARS),
        projects=array(obj(project=STRING, cost=DOLLARS, runs=INTEGER)),
        gpus=array(obj(gpu=STRING, cost=DOLLARS, runs=INTEGER)))),
        params=[query("month", {"type": "string", "pattern": r"^\d{4}-\d{2}$"})])},
    "/volumes": {"get": op("The org's volumes", answer(obj(volumes=array(obj(
        name=STRING, size=INTEGER, files=INTEGER)))))},
    "/volumes/{volume}": {"delete": op("Delete a whole volume", DELETED)},
    "/volumes/{volume}/ls": {"get": op(
        "A folder's entries (or a file's own)",
        answer(obj(entry=ref("Entry"), entries=array(ref("Entry")))),
        params=[PATH, query("recursive", {"enum": ["1"]})])},
    "/volumes/{volume}/plan": {"post": op(
        "Which files of an upload are not there already (creates the volume)",
        answer(obj(send=array(STRING))), body=json_body(obj(files=array(obj(
            path=STRING, size=INTEGER, sha256=STRING)))))},
    "/volumes/{volume}/files": {
        "get": op("A file's bytes (Range supported)",
                  answer({"type": "string", "format": "binary"}, "application/octet-stream"),
                  params=[PATH],
                  # mypy cannot know that a status code names none of op's parameters.
                  **{"206": answer({"type": "string", "format": "binary"},  # type: ignore[arg-type]
                                   "application/octet-stream")}),
        "put": op("One file, at most 256 MB and 5 minutes, checked against X-Div-Sha256",
                  answer(obj(stored={})), "201", bytes_body("application/octet-stream"),
                  [PATH, {"name": "X-Div-Sha256", "in": "header", "required": True,
                          "schema": {"type": "string"}}]),
        "delete": op("Delete a file or a folder", DELETED, params=[PATH])},
    "/volumes/{volume}/bundle": {"post": op(
        "A tar of small files (at most 64 MB): their sha256s in a global DIV.sha256s pax "
        "header (a JSON object of path: sha256), or each in a DIV.sha256 pax header",
        answer(obj(stored=INTEGER)), "201", bytes_body("application/x-tar",
                                                       "application/octet-stream"))},
}


def document() -> dict:
    paths = {}
    for path, operations in PATHS.items():
        names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
        params = [{"name": n, "in": "path", "required": True, "schema": STRING} for n in names]
        paths[path] = {method: ({**operation, "parameters": params + operation.get("parameters", [])}
                                if params else operation)
                       for method, operation in operations.items()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "divergent", "version": "1",
                 "description": "Runs on your organisation's Slurm cluster. Every query is "
                                "scoped by the key's org."},
        "servers": [{"url": "/api/v1"}],
        "security": [{"key": []}],
        "components": {"securitySchemes": {"key": {"type": "http", "scheme": "bearer"}},
                       "schemas": SCHEMAS},
        "paths": paths,
    }


@bp.get("/openapi.json")
def openapi():
    """The description itself, open to all (it holds no org's data)."""
    return jsonify(document())
