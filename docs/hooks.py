"""MkDocs hooks: the parts of the site generated from the code at build time.

- `<!-- generated: vote-event-schema -->` becomes a table of the event's fields, read from
  schemas/vote_event.schema.json (the contract the parser and a test keep in step);
- `<!-- generated: rejection-reasons -->` becomes the list of `schemas.contract.REASONS`;
- the benchmark chart bench/results/latest.png is published as assets/benchmarks.png, so the
  page shows whatever the last `make bench` wrote.

Registered in mkdocs.yml (`hooks:`); `make docs` builds with --strict and tests/test_docs.py
runs that build.
"""

from __future__ import annotations

import json
from pathlib import Path

from mkdocs.structure.files import File, Files

from schemas.contract import REASONS

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "schemas" / "vote_event.schema.json"
CHART = REPO / "bench" / "results" / "latest.png"
CHART_URI = "assets/benchmarks.png"


def _constraints(spec: dict) -> str:
    parts = []
    if "enum" in spec:
        parts.append("one of " + ", ".join(f"`{value}`" for value in spec["enum"]))
    if "minLength" in spec or "maxLength" in spec:
        parts.append(f"{spec.get('minLength', 0)} to {spec['maxLength']} characters")
    if "minimum" in spec:
        parts.append(f"in [{spec['minimum']:,}, {spec['maximum']:,}]")
    if spec.get("not", {}).get("const") is not None:
        parts.append(f"not {spec['not']['const']}")
    if spec.get("format") == "date-time":
        parts.append("RFC 3339 date-time with an offset")
    return "; ".join(parts) or "-"


def _required_in(schema: dict, name: str) -> str:
    """Where a field is required: in every event, in some kinds of event (the oneOf branches), or nowhere."""
    if name in schema["required"]:
        return "yes"
    kinds = [kind["title"].lower() + "s" for kind in schema.get("oneOf", ()) if name in kind.get("required", ())]
    return "in " + " and ".join(kinds) if kinds else "no"


def schema_table(schema: dict) -> str:
    """The fields of the vote event as a markdown table, required ones first."""
    required = schema["required"]
    names = required + [name for name in schema["properties"] if name not in required]
    rows = ["| Field | Required | Type | Constraints | Meaning |", "| --- | --- | --- | --- | --- |"]
    for name in names:
        spec = schema["properties"][name]
        kind = spec.get("type", "string")
        rows.append(
            f"| `{name}` | {_required_in(schema, name)} | {kind} | {_constraints(spec)} | {spec['description']} |"
        )
    unknown = "ignored" if schema.get("additionalProperties", True) else "rejected"
    return "\n".join(rows) + f"\n\n{schema['description']} Unknown fields are {unknown}.\n"


def reasons_list() -> str:
    return ", ".join(f"`{reason}`" for reason in REASONS)


GENERATED = {
    "<!-- generated: vote-event-schema -->": lambda: schema_table(json.loads(SCHEMA.read_text(encoding="utf-8"))),
    "<!-- generated: rejection-reasons -->": reasons_list,
}


def on_page_markdown(markdown: str, page, config, files) -> str:
    for marker, generate in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, CHART_URI, abs_src_path=str(CHART)))
    return files
