#!/usr/bin/env python3
"""Checks one `keyflight openapi-overlay` result with tools that are not keyflight's.

Usage: openapi-overlay-check.py ORIGINAL OVERLAY PATCHED

- the patched document passes openapi-spec-validator (OpenAPI 3.0 or 3.1, detected);
- the overlay passes the Overlay 1.0 JSON Schema (client/tests/openapi/);
- the overlay applied by jsonpath-ng, with the specification's merge (objects merge
  recursively, an update to an array is appended), gives the patched document.
"""

import copy
import json
import pathlib
import sys

import jsonschema
import yaml
from jsonpath_ng import parse as jsonpath
from openapi_spec_validator import validate

SCHEMA = pathlib.Path(__file__).resolve().parent.parent / "client/tests/openapi/overlay-1.0.schema.json"


def load(path):
    text = pathlib.Path(path).read_text()
    return json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)


def merge(node, update):
    for key, value in update.items():
        if isinstance(node.get(key), dict) and isinstance(value, dict):
            merge(node[key], value)
        else:
            node[key] = copy.deepcopy(value)


def apply(doc, overlay):
    for action in overlay["actions"]:
        for match in jsonpath(action["target"]).find(doc):
            node = match.value
            if isinstance(node, dict):
                merge(node, action["update"])
            elif isinstance(node, list):
                node.append(copy.deepcopy(action["update"]))
            else:
                raise SystemExit(f"{action['target']} selects a {type(node).__name__}")
    return doc


def main(original, overlay_path, patched_path):
    patched = load(patched_path)
    validate(patched)
    overlay = load(overlay_path)
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(overlay)
    applied = apply(load(original), overlay)
    if applied != patched:
        raise SystemExit(f"{overlay_path} applied by jsonpath-ng differs from {patched_path}")
    print(f"ok: {patched_path} is valid OpenAPI; {overlay_path} is valid Overlay 1.0 and applies to it")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
