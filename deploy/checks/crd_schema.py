"""Validates custom resources against their CustomResourceDefinitions, as an API server would.

No Kubernetes API server can run where keyflight is tested, so this is the closest offline
equivalent of `kubectl apply --validate=strict` (server-side strict field validation) for the
custom resources keyflight ships, against the CRDs' own `openAPIV3Schema`:

* structural schema semantics: a field the schema does not declare is an error ("unknown
  field"), except under `x-kubernetes-preserve-unknown-fields: true` (the API server keeps
  such fields without looking at them) or `additionalProperties` (map values, validated);
* types (`x-kubernetes-int-or-string` included), `enum`, `required`, `nullable`, string
  lengths and `pattern` (RE2, as the API server's Go regexp), numeric bounds, item and
  property counts, `x-kubernetes-list-type` (`set`, `map` by its keys), and the value
  validations `oneOf`/`anyOf`/`allOf`/`not` (Istio's "exactly one of" constraints);
* every `x-kubernetes-validations` CEL rule, evaluated with cel-python (`celpy`) plus the
  Kubernetes CEL extension functions the CRDs use that celpy lacks (see `EXTENSIONS`). A rule
  that uses a function neither provides fails when the CRDs are loaded, and a rule whose
  evaluation errors rejects the object: no rule is ever skipped. Transition rules (`oldSelf`)
  do not run on create, exactly as on the API server, and are reported as such;
* `metadata` as ObjectMeta: known fields only, a DNS-subdomain name, label and annotation keys
  and values in Kubernetes' formats.

Two deliberate differences, both stricter: an explicit `null` where the schema does not allow
one is an error (the API server silently drops it, which hides a half-written field), and an
`int32` field must fit in 32 bits.

Usage as a library: `Validator.from_file(crd_yaml).validate(doc)` returns a list of
"path: problem" strings (empty when valid).
"""

import re
import urllib.parse

import celpy
import re2
import yaml
from celpy import celtypes

# ----- CEL: the Kubernetes extension functions the vendored CRDs use ---------------------
#
# Kubernetes' CEL environment adds libraries to standard CEL (strings, lists, regex, URLs,
# quantities, ...). celpy implements standard CEL only; the CRDs in deploy/checks/schemas/
# (Istio's; CloudNativePG's rules need nothing beyond standard CEL) use these four on top of it. Each follows the Kubernetes/cel-go definition.


def _substring(text, start, end=None):
    """cel-go strings extension: code-point substring [start, end); out of range is an error."""
    begin = int(start)
    stop = len(text) if end is None else int(end)
    if begin < 0 or stop > len(text) or begin > stop:
        raise celpy.CELEvalError(f"substring: index out of range: {begin}, {stop} of {len(text)}")
    return celtypes.StringType(text[begin:stop])


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.DOTALL)
_HOST = re.compile(r"^[A-Za-z0-9\-._~!$&'()*+,;=:\[\]%]*$")


def _parse_request_uri(text):
    """Go's url.ParseRequestURI, which Kubernetes' `isURL`/`url` use: an absolute URI (with a
    scheme) or an absolute path; control characters and a malformed host are errors. Returns
    the scheme ("" for a path) or None when Go would refuse the string."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return None
    if text.startswith("/"):
        return ""
    match = _SCHEME.match(text)
    if not match:
        return None
    scheme, rest = match.group(1), match.group(2)
    if rest.startswith("//"):
        authority = rest[2:].split("/", 1)[0].split("?", 1)[0]
        host = authority.rsplit("@", 1)[-1]
        if not _HOST.match(host):
            return None
        try:
            urllib.parse.urlsplit(text).port
        except ValueError:
            return None
    return scheme.lower()


def _is_url(text):
    return celtypes.BoolType(_parse_request_uri(str(text)) is not None)


def _url(text):
    scheme = _parse_request_uri(str(text))
    if scheme is None:
        raise celpy.CELEvalError(f"url: {text!r} is not a valid URL")
    return celtypes.MapType({celtypes.StringType("__scheme__"): celtypes.StringType(scheme)})


def _get_scheme(url):
    return url[celtypes.StringType("__scheme__")]


EXTENSIONS = {
    "substring": _substring,
    "isURL": _is_url,
    "url": _url,
    "getScheme": _get_scheme,
}

# celpy's standard functions, and the CEL macros its parser expands itself.
_MACROS = {"has", "all", "exists", "exists_one", "map", "filter"}
_KNOWN_FUNCTIONS = set(celpy.evaluation.base_functions) | _MACROS | set(EXTENSIONS)
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def functions_of(rule):
    """The function and macro names a CEL rule calls (string literals left out)."""
    return set(_CALL.findall(_STRING_LITERAL.sub('""', rule)))


class SchemaError(Exception):
    """The CRDs themselves cannot be used (e.g. a rule with a function nothing provides)."""


class _Rule:
    """One compiled `x-kubernetes-validations` entry."""

    _environment = celpy.Environment()

    def __init__(self, entry, where):
        self.text = entry["rule"]
        self.message = entry.get("message") or f"failed rule: {self.text}"
        self.field_path = entry.get("fieldPath", "")
        self.transition = "oldSelf" in self.text
        missing = functions_of(self.text) - _KNOWN_FUNCTIONS
        if missing:
            raise SchemaError(f"{where}: rule {self.text!r} uses {sorted(missing)}, which this "
                              f"checker cannot evaluate; implement them in crd_schema.EXTENSIONS")
        try:
            self.program = self._environment.program(self._environment.compile(self.text),
                                                     functions=EXTENSIONS)
        except celpy.CELParseError as e:
            raise SchemaError(f"{where}: rule {self.text!r} does not parse: {e}") from e

    def check(self, value):
        """None when the rule holds, else the reason."""
        try:
            result = self.program.evaluate({"self": celpy.json_to_cel(value)})
        except celpy.CELEvalError as e:
            return f"{self.message} (the rule could not be evaluated: {e.args[0] if e.args else e})"
        if isinstance(result, celpy.CELEvalError):
            return f"{self.message} (the rule could not be evaluated: {result.args[0] if result.args else result})"
        if not isinstance(result, celtypes.BoolType):
            return f"{self.message} (the rule gave {result!r}, not a bool)"
        return None if bool(result) else self.message


# ----- ObjectMeta ------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_OBJECT_META = {"name", "generateName", "namespace", "labels", "annotations", "finalizers",
                "ownerReferences", "uid", "resourceVersion", "generation", "creationTimestamp",
                "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"}
_TOP_LEVEL = {"apiVersion", "kind", "metadata", "spec", "status"}


def _qualified_key_problem(key):
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "its prefix must be a DNS subdomain"
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return "its name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return None


def _check_metadata(meta, errors):
    if not isinstance(meta, dict):
        errors.append("metadata: must be an object")
        return
    for field in sorted(set(meta) - _OBJECT_META):
        errors.append(f"metadata.{field}: unknown field")
    name = meta.get("name")
    if name is None and not meta.get("generateName"):
        errors.append("metadata.name: required")
    elif name is not None and (not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        errors.append(f"metadata.name: {name!r} is not a DNS subdomain (lowercase alphanumerics, '-', '.')")
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or len(namespace) > 63
                                  or not _DNS_LABEL.match(namespace)):
        errors.append(f"metadata.namespace: {namespace!r} is not a DNS label")
    for field in ("labels", "annotations"):
        entries = meta.get(field, {})
        if not isinstance(entries, dict):
            errors.append(f"metadata.{field}: must be a map of strings")
            continue
        for key, value in entries.items():
            problem = _qualified_key_problem(str(key))
            if problem:
                errors.append(f"metadata.{field}[{key}]: invalid key: {problem}")
            if not isinstance(value, str):
                errors.append(f"metadata.{field}[{key}]: the value must be a string, got {type(value).__name__}")
            elif field == "labels" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                errors.append(f"metadata.labels[{key}]: {value!r} is not a label value")


# ----- the structural schema walk --------------------------------------------------------

_INT32 = (-(2 ** 31), 2 ** 31 - 1)
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _has_type(value, expected):
    actual = _type_name(value)
    return actual == expected or (expected == "number" and actual == "integer")


class Validator:
    """The CRDs of one file; validates objects of the kinds they define."""

    def __init__(self, crds):
        # (group, kind) -> {version: (schema, served)}
        self.kinds = {}
        self._rules = {}
        for crd in crds:
            spec = crd["spec"]
            group, kind = spec["group"], spec["names"]["kind"]
            for version in spec["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                self.kinds.setdefault((group, kind), {})[version["name"]] = (schema, version.get("served", False))
                self._compile(schema, f"{kind} {group}/{version['name']}")

    @classmethod
    def from_file(cls, path):
        return cls.from_files([path])

    @classmethod
    def from_files(cls, paths):
        """The CRDs of several files (Istio's, CloudNativePG's, ...) in one validator."""
        crds = []
        for path in paths:
            with open(path) as f:
                docs = [d for d in yaml.load_all(f, Loader=yaml.CSafeLoader) if d]
            crds.extend(d for d in docs if d.get("kind") == "CustomResourceDefinition")
        return cls(crds)

    def _compile(self, schema, where):
        """Compiles every rule up front, so a rule nothing can evaluate fails loudly here."""
        if not isinstance(schema, dict):
            return
        entries = schema.get("x-kubernetes-validations")
        if entries:
            self._rules[id(schema)] = [_Rule(entry, where) for entry in entries]
        for key in ("properties",):
            for name, child in (schema.get(key) or {}).items():
                self._compile(child, f"{where}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                self._compile(schema[key], f"{where}[]")
        for key in ("oneOf", "anyOf", "allOf"):
            for child in schema.get(key) or []:
                self._compile(child, where)
        if isinstance(schema.get("not"), dict):
            self._compile(schema["not"], where)

    def rules(self):
        """Every compiled rule (for tests)."""
        return [rule for rules in self._rules.values() for rule in rules]

    def knows(self, api_version, kind):
        group = api_version.split("/")[0] if "/" in api_version else ""
        return (group, kind) in self.kinds

    def validate(self, doc):
        """Every problem of one object, as 'path: problem' strings."""
        errors = []
        api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
        group, _, version = api_version.rpartition("/")
        versions = self.kinds.get((group, kind))
        if versions is None:
            return [f"{api_version} {kind}: no CustomResourceDefinition for this kind"]
        if version not in versions:
            return [f"apiVersion: {kind} has no version {version!r} (known: {sorted(versions)})"]
        schema, served = versions[version]
        if not served:
            errors.append(f"apiVersion: {api_version} is not served")
        for field in sorted(set(doc) - _TOP_LEVEL):
            errors.append(f"{field}: unknown field")
        _check_metadata(doc.get("metadata"), errors)
        body = {k: v for k, v in doc.items() if k in ("spec", "status")}
        properties = {k: v for k, v in (schema.get("properties") or {}).items() if k in ("spec", "status")}
        for field in sorted(set(body) - set(properties)):
            errors.append(f"{field}: unknown field")
        for field, value in body.items():
            if field in properties:
                self._check(properties[field], value, field, errors, structural=True)
        return errors

    def _check(self, schema, value, path, errors, structural):
        """Validates `value` at `path`; `structural` is False inside oneOf/anyOf/allOf/not,
        which only constrain values (unknown fields are the main schema's business)."""
        if value is None:
            if not schema.get("nullable") and structural:
                errors.append(f"{path}: null is not allowed here")
            return
        before = len(errors)
        if schema.get("x-kubernetes-int-or-string"):
            if _type_name(value) not in ("integer", "string"):
                errors.append(f"{path}: must be an integer or a string, got {_type_name(value)}")
                return
        elif "type" in schema and not _has_type(value, schema["type"]):
            errors.append(f"{path}: must be {schema['type']}, got {_type_name(value)}")
            return
        if "enum" in schema and value not in schema["enum"]:
            errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
        if isinstance(value, str):
            self._check_string(schema, value, path, errors)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self._check_number(schema, value, path, errors)
        elif isinstance(value, list):
            self._check_array(schema, value, path, errors, structural)
        elif isinstance(value, dict):
            self._check_object(schema, value, path, errors, structural)
        self._check_combinators(schema, value, path, errors)
        if len(errors) == before:
            for rule in self._rules.get(id(schema), []):
                if rule.transition:
                    continue  # oldSelf: runs on updates only, as on the API server
                problem = rule.check(value)
                if problem:
                    errors.append(f"{path}{rule.field_path}: {problem}")

    def _check_string(self, schema, value, path, errors):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re2.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']!r}")

    def _check_number(self, schema, value, path, errors):
        low, high = {"int32": _INT32, "int64": _INT64}.get(schema.get("format"), (None, None))
        if low is not None and not (low <= value <= high):
            errors.append(f"{path}: {value} does not fit {schema['format']}")
        if "minimum" in schema:
            if value < schema["minimum"] or (schema.get("exclusiveMinimum") and value == schema["minimum"]):
                errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema:
            if value > schema["maximum"] or (schema.get("exclusiveMaximum") and value == schema["maximum"]):
                errors.append(f"{path}: {value} is above the maximum {schema['maximum']}")
        if "multipleOf" in schema and value % schema["multipleOf"]:
            errors.append(f"{path}: {value} is not a multiple of {schema['multipleOf']}")

    def _check_array(self, schema, value, path, errors, structural):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set" or schema.get("uniqueItems"):
            seen = []
            for i, item in enumerate(value):
                if item in seen:
                    errors.append(f"{path}[{i}]: duplicate item {item!r} in a set")
                seen.append(item)
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            seen = set()
            for i, item in enumerate(value):
                key = tuple(repr(item.get(k)) if isinstance(item, dict) else None for k in keys)
                if key in seen:
                    errors.append(f"{path}[{i}]: duplicate entry for keys {keys}")
                seen.add(key)
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                self._check(schema["items"], item, f"{path}[{i}]", errors, structural)

    def _check_object(self, schema, value, path, errors, structural):
        for field in schema.get("required", []):
            if field not in value:
                errors.append(f"{path}.{field}: required")
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errors.append(f"{path}: fewer than {schema['minProperties']} properties")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errors.append(f"{path}: more than {schema['maxProperties']} properties")
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
        for key, child in value.items():
            at = f"{path}.{key}"
            if key in properties:
                self._check(properties[key], child, at, errors, structural)
            elif isinstance(extra, dict):
                self._check(extra, child, f"{path}[{key}]", errors, structural)
            elif extra is False and structural:
                errors.append(f"{at}: unknown field")
            elif not structural or preserve or extra is True:
                continue
            else:
                errors.append(f"{at}: unknown field")

    def _check_combinators(self, schema, value, path, errors):
        def matches(sub):
            found = []
            self._check(sub, value, path, found, structural=False)
            return not found

        if "allOf" in schema:
            for sub in schema["allOf"]:
                self._check(sub, value, path, errors, structural=False)
        if "anyOf" in schema and not any(matches(sub) for sub in schema["anyOf"]):
            errors.append(f"{path}: matches none of the allowed shapes (anyOf)")
        if "oneOf" in schema:
            count = sum(1 for sub in schema["oneOf"] if matches(sub))
            if count != 1:
                errors.append(f"{path}: must match exactly one allowed shape (oneOf), matches {count}")
        if "not" in schema and matches(schema["not"]):
            errors.append(f"{path}: matches a forbidden shape (not)")


class StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys, as strict field validation does (PyYAML
    would keep the last one silently)."""


def _mapping_without_duplicates(loader, node):
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate field {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
