"""How Python's urllib.parse reads request targets: one JSON reading per target
on stdin (a JSON array of strings), written to stdout as a JSON array.

A reading is what an application behind the proxy can tell apart: the path as
`urlsplit` gives it (WSGI servers pass it on as it came), split into segments,
each percent-decoded to bytes (hex), and the query as `parse_qsl` parses it,
grouped by name with every name's values in order (decoded as Latin-1, so the
exact bytes survive).
"""

import json
import sys
from urllib.parse import parse_qsl, unquote_to_bytes, urlsplit


def reading(target):
    parts = urlsplit("http://h" + target)
    path = [unquote_to_bytes(segment).hex() for segment in parts.path.split("/")]
    groups = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True, encoding="latin-1"):
        groups.setdefault(name, []).append(value)
    return json.dumps(dict(path=path, query=sorted(groups.items())))


print(json.dumps([reading(t) for t in json.load(sys.stdin)]))
