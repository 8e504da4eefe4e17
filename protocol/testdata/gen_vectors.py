#!/usr/bin/env python3
"""Regenerates vectors.json: K3 scope and K4 fingerprint test vectors.

Each vector is a request as the edge filter receives it (the full header list
with its pseudo-headers, the body, the principal and its source) plus the
policy's scope mode and fingerprint headers. The expected digests are computed
here, independently of the Rust code, from the framing rules (every field =
u64 big-endian length + bytes; lists are preceded by a count field) and from
normalized forms written out by hand. The Rust tests (native and wasm32) feed
the same request through `keyflight_protocol::request` and must reproduce them
bit for bit.

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


def source_fields(description):
    """The framing of a principal source, from its `kind:...` description."""
    kind, rest = description.split(":", 1)
    if kind == "header":
        return [b"header", rest.encode()]
    if kind == "property":
        segments = rest.split(".")
        return [b"property", count(len(segments))] + [s.encode() for s in segments]
    if kind == "jwt_claim":
        metadata_key, claim = rest.split(":", 1)
        segments = claim.split(".")
        return [b"jwt_claim", metadata_key.encode(), count(len(segments))] + [s.encode() for s in segments]
    raise ValueError(description)


def scope(principal, authority, method, path, query, key, mode):
    fields = [f"keyflight/scope/v2/{mode}".encode()]
    if principal is None:
        fields.append(b"anonymous")
    elif "actor" in principal:
        # A delegated principal (RFC 8693): the subject, then the actor, each with its source.
        actor = principal["actor"]
        fields += ([b"delegated"] + source_fields(principal["source"]) + [principal["name"].encode()]
                   + source_fields(actor["source"]) + [actor["name"].encode()])
    else:
        fields += [b"named"] + source_fields(principal["source"]) + [principal["name"].encode()]
    fields.append(authority.encode())
    if mode == "route":
        fields += [method.encode(), path.encode(), count(len(query))]
        for name, value in query:
            fields += [name.encode(), value.encode()]
    fields.append(key.encode())
    return framed(fields)


def media_type_fields(media_type):
    if media_type is None:
        return [b"absent"]
    if "unparsed" in media_type:
        return [b"unparsed", media_type["unparsed"].encode()]
    kind, subtype = media_type["type"].split("/")
    fields = [b"parsed", kind.encode(), subtype.encode(), count(len(media_type["parameters"]))]
    for name, value in media_type["parameters"]:
        fields += [name.encode(), value.encode()]
    return fields


def fingerprint(method, path, query, media_type, form, body_digest, headers):
    fields = [b"keyflight/fingerprint/v2", method.encode(), path.encode(), count(len(query))]
    for name, value in query:
        fields += [name.encode(), value.encode()]
    fields += media_type_fields(media_type)
    fields += [form.encode(), bytes.fromhex(body_digest), count(len(headers))]
    for name, value in headers:
        fields.append(name.encode())
        fields += [b"\x01", value.encode()] if value is not None else [b"\x00"]
    return framed(fields)


WEB = {"source": "property:connection.uri_san_peer_certificate", "name": "spiffe://cluster.local/ns/shop/sa/web"}
DEFAULT_FP_HEADERS = ["if-match", "x-approval-digest"]


def req(path, body="", content_type="application/json", authority="orders.shop.svc", scheme="https",
        method="POST", key="order-42", extra=(), body_b64=None):
    headers = [[":method", method], [":path", path], [":authority", authority], [":scheme", scheme]]
    if key is not None:
        headers.append(["idempotency-key", key])
    if content_type is not None:
        headers.append(["content-type", content_type])
    headers += [list(h) for h in extra]
    out = dict(headers=headers)
    if body_b64 is not None:
        out["body_b64"] = body_b64
    else:
        out["body"] = body
    return out


JSON_MT = dict(type="application/json", parameters=[])
ORDERS_Q = [["x", "1"], ["y", "~"]]
CANONICAL_ORDER = '{"amount":150,"currency":"EUR","items":[{"qty":1,"sku":"€-1"}]}'

# Each: the request, the policy (mode, fingerprint headers), the principal, and
# every normalized form written by hand.
VECTORS = [
    dict(name="route scope, json body",
         request=req("/v1/orders?x=1&y=~", '{"amount":150,"currency":"EUR","items":[{"qty":1,"sku":"€-1"}]}'),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/v1/orders", query=ORDERS_Q, key="order-42",
         media_type=JSON_MT, canonical=CANONICAL_ORDER, headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="the same request respelled: target, authority, media type, key, body (same digests)",
         request=req("/v1/%6Frders?y=%7e&x=1",
                     '{ "currency": "EUR", "amount": 1.50e2, "items": [ {"sku": "\\u20ac-1", "qty": 1.0} ] }',
                     content_type='Application/JSON ; Charset="UTF-8"', authority="ORDERS.shop.svc.:443",
                     key='"order-42"'),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/v1/orders", query=ORDERS_Q, key="order-42",
         media_type=JSON_MT, canonical=CANONICAL_ORDER, headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="the same name from a jwt subject is another principal",
         request=req("/v1/orders?x=1&y=~", CANONICAL_ORDER),
         principal={"source": "jwt_claim:jwt_payload:sub", "name": WEB["name"]}, mode="route",
         authority="orders.shop.svc", method="POST", path="/v1/orders", query=ORDERS_Q, key="order-42",
         media_type=JSON_MT, canonical=CANONICAL_ORDER, headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="a delegated principal: the jwt subject and the actor acting for them (RFC 8693 act.sub)",
         request=req("/v1/orders?x=1&y=~", CANONICAL_ORDER),
         principal={"source": "jwt_claim:jwt_payload:sub", "name": "alice",
                    "actor": {"source": "jwt_claim:jwt_payload:act.sub", "name": "checkout-bff"}},
         mode="route",
         authority="orders.shop.svc", method="POST", path="/v1/orders", query=ORDERS_Q, key="order-42",
         media_type=JSON_MT, canonical=CANONICAL_ORDER, headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="another user delegated by the same actor is another principal",
         request=req("/v1/orders?x=1&y=~", CANONICAL_ORDER),
         principal={"source": "jwt_claim:jwt_payload:sub", "name": "bob",
                    "actor": {"source": "jwt_claim:jwt_payload:act.sub", "name": "checkout-bff"}},
         mode="route",
         authority="orders.shop.svc", method="POST", path="/v1/orders", query=ORDERS_Q, key="order-42",
         media_type=JSON_MT, canonical=CANONICAL_ORDER, headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="repeated parameters keep their order; dot and empty segments are kept",
         request=req("/v1//notify/./x?to=bob&cc=%7Eeve&to=ann", "", content_type=None,
                     extra=[["x-user", " alice "]]),
         principal={"source": "header:x-user", "name": "alice"}, mode="route",
         authority="orders.shop.svc", method="POST", path="/v1//notify/./x",
         query=[["cc", "~eve"], ["to", "bob"], ["to", "ann"]], key="order-42",
         media_type=None, raw_reason="not_json_content_type", headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="service scope, http default port, anonymous, selected headers repeated (joined with ',' as Envoy does)",
         request=req("/v1/other", "", content_type="text/plain", authority="orders.shop.svc:80", scheme="http",
                     method="DELETE", key="a b",
                     extra=[["If-Match", ' "v1" '], ["if-match", '"v2"'], ["x-approval-digest", ""]]),
         principal=None, mode="service",
         authority="orders.shop.svc", method="DELETE", path="/v1/other", query=[], key="a b",
         media_type=dict(type="text/plain", parameters=[]), raw_reason="not_json_content_type",
         headers=[["if-match", '"v1","v2"'], ["x-approval-digest", ""]]),
    dict(name="a port that is not the scheme's default is kept; escaped quoted key",
         request=req("/", "", content_type=None, authority="h:80", scheme="https", method="PUT",
                     key='"x\\"y\\\\z"', extra=[["x-user", "bob"]]),
         principal={"source": "header:x-user", "name": "bob"}, mode="route",
         authority="h:80", method="PUT", path="/", query=[], key='x"y\\z',
         media_type=None, raw_reason="not_json_content_type", headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="multipart: parameters sorted, names lower-cased, values unquoted",
         request=req("/upload", "--b1--", content_type='multipart/form-data; Charset=UTF-8; boundary="b1"'),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/upload", query=[], key="order-42",
         media_type=dict(type="multipart/form-data", parameters=[["boundary", "b1"], ["charset", "utf-8"]]),
         raw_reason="not_json_content_type", headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="json in another charset is digested raw",
         request=req("/pay", '{"b":1,"a":2}', content_type="application/json; charset=ISO-8859-1"),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/pay", query=[], key="order-42",
         media_type=dict(type="application/json", parameters=[["charset", "iso-8859-1"]]),
         raw_reason="not_utf8_charset", headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="a content type that is not a media type is kept as sent",
         request=req("/pay", '{"b":1}', content_type="application/json; charset = utf-8 "),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/pay", query=[], key="order-42",
         media_type=dict(unparsed="application/json; charset = utf-8"),
         raw_reason="not_json_content_type", headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="lossy number: 2^53+1 digested raw",
         request=req("/pay", '{"amount":9007199254740993}'),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/pay", query=[], key="order-42",
         media_type=JSON_MT, raw_reason="lossy_number", headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="exact number: 2^53 canonicalized",
         request=req("/pay", '{"amount":9007199254740992}'),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/pay", query=[], key="order-42",
         media_type=JSON_MT, canonical='{"amount":9007199254740992}',
         headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="invalid json (duplicate keys), vendor json type",
         request=req("/p?", '{"a":1,"a":2}', content_type="application/vnd.api+json"),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/p", query=[], key="order-42",
         media_type=dict(type="application/vnd.api+json", parameters=[]), raw_reason="invalid_json",
         headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="binary body, no key (fingerprint only)",
         request=req("/upload?x&x=&y=+", content_type=None, key=None,
                     body_b64=base64.b64encode(bytes(range(256))).decode()),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/upload", query=[["x", ""], ["x", ""], ["y", "+"]],
         key=None, media_type=None, raw_reason="not_json_content_type",
         headers=[["if-match", None], ["x-approval-digest", None]]),
    dict(name="rfc 8785 key order and escapes",
         request=req("/jcs", '{"\\ufb33":[1e21,1e-7],"\\ud83d\\ude00":"\\u000f","z":-0,"é":0.000001}'),
         principal=WEB, mode="route",
         authority="orders.shop.svc", method="POST", path="/jcs", query=[], key="order-42",
         media_type=JSON_MT, canonical='{"z":0,"\u00e9":0.000001,"\U0001f600":"\\u000f","\ufb33":[1e+21,1e-7]}',
         headers=[["if-match", None], ["x-approval-digest", None]]),
]


def expect(v):
    req = v["request"]
    if "canonical" in v:
        form, text = "jcs", v["canonical"].encode()
    else:
        form = "raw"
        text = base64.b64decode(req["body_b64"]) if "body_b64" in req else req["body"].encode()
    body_digest = hashlib.sha256(text).hexdigest()
    out = dict(authority=v["authority"], normalized_path=v["path"], sorted_query=v["query"],
               media_type=v["media_type"], headers=v["headers"])
    if form == "jcs":
        out["canonical"] = v["canonical"]
    else:
        out["raw_reason"] = v["raw_reason"]
    out["body_digest"] = body_digest
    out["fingerprint"] = fingerprint(v["method"], v["path"], v["query"], v["media_type"], form, body_digest,
                                     [(n, val) for n, val in v["headers"]])
    out["scope"] = (scope(v["principal"], v["authority"], v["method"], v["path"], v["query"], v["key"], v["mode"])
                    if v["key"] is not None else None)
    return out


def main():
    vectors = [dict(name=v["name"], request=v["request"], principal=v["principal"], mode=v["mode"],
                    fingerprint_headers=DEFAULT_FP_HEADERS, expected=expect(v)) for v in VECTORS]
    print(json.dumps(dict(requests=vectors), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
