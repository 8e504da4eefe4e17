#!/usr/bin/env python3
"""Regenerates vectors.json: K3 scope and K4 fingerprint test vectors.

The expected digests are computed here, independently of the Rust code, from
the framing rules (every field = u64 big-endian length + bytes; lists are
preceded by a count field) and from normalized forms written out by hand. The
Rust tests (native and wasm32) must reproduce them bit for bit.

Usage: python3 protocol/testdata/gen_vectors.py > protocol/testdata/vectors.json
"""

import base64
import hashlib
import json
import struct


def framed(fields):
    h = hashlib.sha256()
    for f in fields:
        h.update(struct.pack(">Q", len(f)))
        h.update(f)
    return h.hexdigest()


def count(n):
    return struct.pack(">Q", n)


def scope(principal, authority, method, route, key, mode):
    """`route` is (normalized path, sorted query pairs), written by hand."""
    fields = [f"keyflight/scope/v1/{mode}".encode()]
    fields += [b"named", principal.encode()] if principal is not None else [b"anonymous"]
    fields.append(authority.encode())
    if mode == "route":
        path, query = route
        fields += [method.encode(), path.encode(), count(len(query))]
        for name, value in query:
            fields += [name.encode(), value.encode()]
    fields.append(key.encode())
    return framed(fields)


ORDERS = ("/v1/orders", [("x", "1"), ("y", "~")])
SCOPES = [
    # (name, principal or None for anonymous-shared, authority, method, path+query,
    #  its normal form by hand, raw header value, unquoted key, mode)
    ("route", "spiffe://cluster.local/ns/shop/sa/web", "orders.shop.svc", "POST", "/v1/orders?x=1&y=~",
     ORDERS, "order-42", "order-42", "route"),
    ("route, respelled target and quoted key", "spiffe://cluster.local/ns/shop/sa/web", "orders.shop.svc", "POST",
     "/v1/./orders?y=%7e&x=1", ORDERS, '"order-42"', "order-42", "route"),
    ("route, other principal", "spiffe://cluster.local/ns/shop/sa/batch", "orders.shop.svc", "POST",
     "/v1/orders?x=1&y=~", ORDERS, "order-42", "order-42", "route"),
    ("service", "alice", "orders.shop.svc", "POST", "/v1/orders", None, "k", "k", "service"),
    ("service ignores method and path", "alice", "orders.shop.svc", "DELETE", "/v1/other", None, "k", "k", "service"),
    ("anonymous shared", None, "orders.shop.svc", "POST", "/v1/orders?", ("/v1/orders", []), "a b", "a b", "route"),
    ("escaped quoted key", "bob", "h", "PUT", "/", ("/", []), r'"x\"y\\z"', 'x"y\\z', "route"),
]


def fingerprint(method, path, query, form, body_digest, headers):
    fields = [b"keyflight/fingerprint/v1", method.encode(), path.encode(), count(len(query))]
    for name, value in query:
        fields += [name.encode(), value.encode()]
    fields += [form.encode(), bytes.fromhex(body_digest), count(len(headers))]
    for name, value in headers:
        fields.append(name.encode())
        fields += [b"\x01", value.encode()] if value is not None else [b"\x00"]
    return framed(fields)


# Each: request, then the normalized forms by hand. Headers in the expectation
# are lowercased, trimmed and sorted.
FINGERPRINTS = [
    dict(name="json body, messy spelling",
         request=dict(method="POST", path_and_query="/v1/./payments/../orders?b=2&a=%7e1",
                      content_type="application/json; charset=utf-8",
                      body='{ "currency": "EUR", "amount": 1.50e2, "items": [ {"sku": "\\u20ac-1", "qty": 1.0} ] }',
                      headers=[["X-Approval-Digest", " abc "], ["if-match", None]]),
         path="/v1/orders", query=[["a", "~1"], ["b", "2"]],
         canonical='{"amount":150,"currency":"EUR","items":[{"qty":1,"sku":"€-1"}]}',
         headers=[["if-match", None], ["x-approval-digest", "abc"]]),
    dict(name="json body, canonical spelling (same fingerprint)",
         request=dict(method="POST", path_and_query="/v1/orders?a=~1&b=2", content_type="application/json",
                      body='{"amount":150,"currency":"EUR","items":[{"qty":1,"sku":"€-1"}]}',
                      headers=[["if-match", None], ["x-approval-digest", "abc"]]),
         path="/v1/orders", query=[["a", "~1"], ["b", "2"]],
         canonical='{"amount":150,"currency":"EUR","items":[{"qty":1,"sku":"€-1"}]}',
         headers=[["if-match", None], ["x-approval-digest", "abc"]]),
    dict(name="lossy number: 2^53+1 digested raw",
         request=dict(method="POST", path_and_query="/pay", content_type="application/json",
                      body='{"amount":9007199254740993}', headers=[]),
         path="/pay", query=[], raw_reason="lossy_number", headers=[]),
    dict(name="exact number: 2^53 canonicalized",
         request=dict(method="POST", path_and_query="/pay", content_type="application/json",
                      body='{"amount":9007199254740992}', headers=[]),
         path="/pay", query=[], canonical='{"amount":9007199254740992}', headers=[]),
    dict(name="not json content type",
         request=dict(method="PUT", path_and_query="/files/a%2fb", content_type="text/plain",
                      body='{"b":1,"a":2}', headers=[["if-match", '"v1"']]),
         path="/files/a%2Fb", query=[], raw_reason="not_json_content_type", headers=[["if-match", '"v1"']]),
    dict(name="invalid json (duplicate keys)",
         request=dict(method="POST", path_and_query="/p?", content_type="application/vnd.api+json",
                      body='{"a":1,"a":2}', headers=[]),
         path="/p", query=[], raw_reason="invalid_json", headers=[]),
    dict(name="empty body, json content type",
         request=dict(method="DELETE", path_and_query="//a/b/..?x&x=&y=+", content_type="application/json",
                      body="", headers=[["if-match", ""]]),
         path="//a/", query=[["x", ""], ["x", ""], ["y", "+"]], raw_reason="invalid_json",
         headers=[["if-match", ""]]),
    dict(name="binary body",
         request=dict(method="POST", path_and_query="/upload", content_type=None,
                      body_b64=base64.b64encode(bytes(range(256))).decode(), headers=[]),
         path="/upload", query=[], raw_reason="not_json_content_type", headers=[]),
    dict(name="rfc 8785 key order and escapes",
         request=dict(method="POST", path_and_query="/jcs", content_type="application/json",
                      body='{"\\ufb33":[1e21,1e-7],"\\ud83d\\ude00":"\\u000f","z":-0,"é":0.000001}',
                      headers=[]),
         path="/jcs", query=[],
         canonical='{"z":0,"\u00e9":0.000001,"\U0001f600":"\\u000f","\ufb33":[1e+21,1e-7]}', headers=[]),
]


def expect(v):
    req = v["request"]
    if "canonical" in v:
        form, text = "jcs", v["canonical"].encode()
    else:
        form = "raw"
        text = base64.b64decode(req["body_b64"]) if "body_b64" in req else req["body"].encode()
    body_digest = hashlib.sha256(text).hexdigest()
    out = dict(normalized_path=v["path"], sorted_query=v["query"], headers=v["headers"])
    if form == "jcs":
        out["canonical"] = v["canonical"]
    else:
        out["raw_reason"] = v["raw_reason"]
    out["body_digest"] = body_digest
    out["fingerprint"] = fingerprint(req["method"], v["path"], v["query"], form, body_digest,
                                     [(n, val) for n, val in v["headers"]])
    return out


def main():
    vectors = dict(
        scope=[dict(name=n, principal=p, authority=a, method=m, path_and_query=pq, key_header=raw, mode=mode,
                    expected=scope(p, a, m, route, key, mode))
               for (n, p, a, m, pq, route, raw, key, mode) in SCOPES],
        fingerprint=[dict(name=v["name"], request=v["request"], expected=expect(v)) for v in FINGERPRINTS],
    )
    print(json.dumps(vectors, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
