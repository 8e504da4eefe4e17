"""The CRD validator rejects what an API server would (run by scripts/validate-manifests.sh).

Each test breaks one shipped manifest in one way and expects the validator to name the
problem, so a validator that accepted everything would fail here.
"""

import copy
import pathlib
import unittest

import yaml

import crd_schema

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy/checks/schemas/istio/customresourcedefinitions.gen.yaml"
CNPG_CRDS = ROOT / "deploy/checks/schemas/cloudnative-pg/postgresql.cnpg.io_clusters.yaml"
VALIDATOR = crd_schema.Validator.from_files([CRDS, CNPG_CRDS])


def shipped(relative):
    with (ROOT / relative).open() as f:
        return next(d for d in yaml.load_all(f, Loader=crd_schema.StrictLoader) if d)


ENVOY_FILTER = shipped("envoy/istio/rollout/keyflight-enforce.yaml")
DESTINATION_RULE = shipped("envoy/istio/lease-store/destination-rule.yaml")
AUTHORIZATION_POLICY = shipped("envoy/istio/lease-store/authorization-policy.yaml")
VIRTUAL_SERVICE = shipped("envoy/istio/gateway/orders-route.yaml")
POSTGRES_CLUSTER = shipped("deploy/cloudnative-pg/cluster.yaml")


def broken(doc, edit):
    doc = copy.deepcopy(doc)
    edit(doc)
    return VALIDATOR.validate(doc)


class ShippedManifests(unittest.TestCase):
    def test_the_originals_are_valid(self):
        for doc in (ENVOY_FILTER, DESTINATION_RULE, AUTHORIZATION_POLICY, VIRTUAL_SERVICE,
                    POSTGRES_CLUSTER):
            self.assertEqual(VALIDATOR.validate(doc), [], doc["kind"])


class UnknownFields(unittest.TestCase):
    def test_an_unknown_spec_field_is_rejected(self):
        errors = broken(DESTINATION_RULE, lambda d: d["spec"]["trafficPolicy"].update(retries=2))
        self.assertEqual(errors, ["spec.trafficPolicy.retries: unknown field"])

    def test_a_misspelled_field_deep_in_a_patch_match_is_rejected(self):
        def edit(d):
            d["spec"]["configPatches"][1]["match"]["listener"]["filterChain"]["filtr"] = {}
        self.assertEqual(broken(ENVOY_FILTER, edit),
                         ["spec.configPatches[1].match.listener.filterChain.filtr: unknown field"])

    def test_the_free_form_patch_value_accepts_any_field(self):
        # x-kubernetes-preserve-unknown-fields: the API server keeps it unread (Envoy checks it).
        errors = broken(ENVOY_FILTER, lambda d: d["spec"]["configPatches"][0]["patch"]["value"].update(anything=1))
        self.assertEqual(errors, [])

    def test_unknown_top_level_and_metadata_fields_are_rejected(self):
        errors = broken(VIRTUAL_SERVICE, lambda d: (d.update(specs={}), d["metadata"].update(label={})))
        self.assertEqual(sorted(errors), ["metadata.label: unknown field", "specs: unknown field"])

    def test_duplicate_keys_are_rejected_when_loading(self):
        with self.assertRaises(yaml.constructor.ConstructorError):
            yaml.load("a: 1\na: 2\n", Loader=crd_schema.StrictLoader)


class TypesAndEnums(unittest.TestCase):
    def test_a_wrong_enum_value_is_rejected(self):
        errors = broken(ENVOY_FILTER, lambda d: d["spec"]["configPatches"][0].update(applyTo="HTTP_FILTERS"))
        self.assertEqual(len(errors), 1, errors)
        self.assertTrue(errors[0].startswith("spec.configPatches[0].applyTo: 'HTTP_FILTERS' is not one of"), errors)

    def test_a_wrong_type_is_rejected(self):
        def edit(d):
            d["spec"]["trafficPolicy"]["outlierDetection"]["consecutiveLocalOriginFailures"] = "five"
        errors = broken(DESTINATION_RULE, edit)
        self.assertTrue(any("consecutiveLocalOriginFailures: must be integer" in e for e in errors), errors)

    def test_a_missing_required_field_is_rejected(self):
        errors = broken(VIRTUAL_SERVICE, lambda d: d["spec"]["http"][0]["route"][0]["destination"].pop("host"))
        self.assertEqual(errors, ["spec.http[0].route[0].destination.host: required"])

    def test_exactly_one_of_is_enforced(self):
        # StringMatch is exactly one of exact / prefix / regex.
        errors = broken(VIRTUAL_SERVICE, lambda d: d["spec"]["http"][0]["match"][0]["uri"].update(exact="/x"))
        self.assertTrue(any("oneOf" in e for e in errors), errors)

    def test_a_bad_name_is_rejected(self):
        errors = broken(DESTINATION_RULE, lambda d: d["metadata"].update(name="Lease_Store"))
        self.assertTrue(any(e.startswith("metadata.name:") for e in errors), errors)

    def test_an_unserved_or_unknown_version_is_rejected(self):
        errors = broken(DESTINATION_RULE, lambda d: d.update(apiVersion="networking.istio.io/v2"))
        self.assertTrue(errors and errors[0].startswith("apiVersion:"), errors)


class CelRules(unittest.TestCase):
    def test_a_duration_rule_is_evaluated(self):
        # duration(self) >= duration('1ms') on outlierDetection.interval
        errors = broken(DESTINATION_RULE, lambda d: d["spec"]["trafficPolicy"]["outlierDetection"].update(interval="0.5ms"))
        self.assertEqual(len(errors), 1, errors)
        self.assertTrue(errors[0].startswith("spec.trafficPolicy.outlierDetection.interval:"), errors)

    def test_a_cross_field_rule_is_evaluated(self):
        # EnvoyFilter: at most one of workloadSelector and targetRefs.
        def edit(d):
            d["spec"]["targetRefs"] = [{"kind": "Service", "group": "", "name": "payments"}]
        errors = broken(ENVOY_FILTER, edit)
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("workloadSelector", errors[0])

    def test_a_rule_on_map_keys_is_evaluated(self):
        # AuthorizationPolicy selector labels: keys must not contain '*'.
        errors = broken(AUTHORIZATION_POLICY, lambda d: d["spec"]["selector"]["matchLabels"].update({"app*": "x"}))
        self.assertEqual(errors, ["spec.selector.matchLabels: wildcard not allowed in label key match"])

    def test_a_rule_that_errors_rejects_the_object(self):
        rule = crd_schema._Rule({"rule": "self.substring(7, 9) == \"/\""}, "test")
        self.assertIsNotNone(rule.check("unix://"))

    def test_a_rule_with_an_unknown_function_fails_loudly_when_loaded(self):
        with self.assertRaises(crd_schema.SchemaError):
            crd_schema._Rule({"rule": "self.quantity() > 1"}, "test")

    def test_every_rule_in_the_crds_uses_only_known_functions(self):
        # from_file compiled every rule; a rule beyond celpy and EXTENSIONS would have raised.
        self.assertGreater(len(VALIDATOR.rules()), 300)


class KubernetesExtensions(unittest.TestCase):
    def test_substring(self):
        self.assertEqual(crd_schema._substring("unix:///x", 7, 8), "/")
        self.assertEqual(crd_schema._substring("abc", 1), "bc")
        with self.assertRaises(Exception):
            crd_schema._substring("abc", 2, 5)

    def test_urls(self):
        self.assertTrue(crd_schema._is_url("oci://registry.example.com/keyflight/filter:0.1.0"))
        self.assertTrue(crd_schema._is_url("/absolute/path"))
        self.assertFalse(crd_schema._is_url("registry.example.com/keyflight"))
        self.assertFalse(crd_schema._is_url("http://bad host/"))
        self.assertEqual(crd_schema._get_scheme(crd_schema._url("HTTPS://a/b")), "https")


if __name__ == "__main__":
    unittest.main()


class CloudNativePgCluster(unittest.TestCase):
    """The example Cluster (deploy/cloudnative-pg/) against CloudNativePG's own CRD."""

    def synchronous(self, edit):
        return broken(POSTGRES_CLUSTER, lambda d: edit(d["spec"]["postgresql"]["synchronous"]))

    def test_a_misspelled_synchronous_field_is_rejected(self):
        errors = self.synchronous(lambda s: s.update(dataDurabilty="required"))
        self.assertEqual(errors, ["spec.postgresql.synchronous.dataDurabilty: unknown field"])

    def test_an_unknown_durability_is_rejected(self):
        errors = self.synchronous(lambda s: s.update(dataDurability="strict"))
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("dataDurability: 'strict' is not one of", errors[0])

    def test_zero_synchronous_standbys_fail_the_crds_cel_rule(self):
        errors = self.synchronous(lambda s: s.update(number=0))
        self.assertEqual(errors, ["spec.postgresql.synchronous.number: The number of synchronous "
                                  "replicas should be greater than zero"])

    def test_a_synchronous_stanza_needs_a_method(self):
        errors = self.synchronous(lambda s: s.pop("method"))
        self.assertTrue(any("method" in e and "required" in e for e in errors), errors)

