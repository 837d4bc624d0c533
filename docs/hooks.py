"""MkDocs hook: the API reference page is rendered from the description the
server itself serves (GET /api/v1/openapi.json, divergent.app.api.openapi),
so the manual never disagrees with the API."""
from __future__ import annotations

from typing import Any

MARKER = "<!-- openapi -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from divergent.app.api.openapi import document
    return markdown.replace(MARKER, render(document()))


def schema_text(schema: dict) -> str:
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[-1]}`"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(schema_text(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if schema.get("type") == "array":
        return f"list of {schema_text(schema.get('items', {}))}"
    return f"`{schema.get('type', 'any')}`"


def render(spec: dict) -> str:
    lines = [spec["info"]["description"], "",
             f"Every path is under `{spec['servers'][0]['url']}`; every call but the public "
             "ones sends the key as `Authorization: Bearer div_…`.", ""]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            lines += [f"## `{method.upper()} {path}`", "", operation["summary"], ""]
            params = operation.get("parameters", [])
            if params:
                lines += ["| Parameter | In | Type | |", "|---|---|---|---|"]
                lines += [f"| `{p['name']}` | {p['in']} | {schema_text(p['schema'])} | "
                          f"{p.get('description', '')} |" for p in params]
                lines.append("")
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                lines += [f"Body: {media}, {schema_text(content.get('schema', {}))}", ""]
            answers = [f"{status}" for status in operation["responses"] if status != "default"]
            lines += [f"Answers: {', '.join(answers)}; an error as `Error`.", ""]
    lines += ["## Schemas", ""]
    for name, schema in spec["components"]["schemas"].items():
        fields = ", ".join(f"`{k}`" for k in schema.get("properties", {}))
        lines += [f"- `{name}`: {fields or schema_text(schema)}"]
    return "\n".join(lines) + "\n"
