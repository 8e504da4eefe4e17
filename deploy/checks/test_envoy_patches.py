"""Real Envoy refuses a broken EnvoyFilter patch (run by scripts/validate-manifests.sh).

Needs KEYFLIGHT_ENVOY (the Envoy binary) and KEYFLIGHT_WASM (the built filter) in the
environment, as the script sets them. Each test breaks one shipped patch in one way (the
script itself checks that the unbroken ones pass).
"""

import copy
import json
import os
import pathlib
import unittest

import yaml

import crd_schema
import envoy_patches

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENVOY = os.environ.get("KEYFLIGHT_ENVOY", "")
WASM = pathlib.Path(os.environ.get("KEYFLIGHT_WASM", ROOT / "target/wasm32-wasip1/release/keyflight_filter_wasm.wasm"))


def shipped_enforce():
    with (ROOT / "envoy/istio/rollout/keyflight-enforce.yaml").open() as f:
        return next(d for d in yaml.load_all(f, Loader=crd_schema.StrictLoader) if d)


def reasons(doc, patch_index):
    """Envoy's refusals for every embedding of one patch (None for an accepted one)."""
    patch = doc["spec"]["configPatches"][patch_index]
    return [envoy_patches.validate(ENVOY, json.dumps(config))
            for _, config in envoy_patches.bootstraps_for(patch, WASM)]


def extension(doc):
    return doc["spec"]["configPatches"][0]["patch"]["value"]["typed_config"]["config"]


@unittest.skipUnless(ENVOY and WASM.is_file(), "needs KEYFLIGHT_ENVOY and the built .wasm")
class BrokenPatches(unittest.TestCase):
    def test_a_misspelled_wasm_filter_field_is_refused(self):
        doc = shipped_enforce()
        config = extension(doc)
        config["allow_on_header_stop_iteration"] = config.pop("allow_on_headers_stop_iteration")
        found = reasons(doc, 0)
        self.assertTrue(found and all(found), found)
        self.assertIn("allow_on_header_stop_iteration", found[0])

    def test_a_plugin_configuration_the_filter_refuses_is_refused(self):
        doc = shipped_enforce()
        plugin = json.loads(extension(doc)["configuration"]["value"])
        plugin["policies"][0]["lease_ms"] = 5
        extension(doc)["configuration"]["value"] = json.dumps(plugin)
        shipped_shape, with_the_module = reasons(doc, 0)
        self.assertIsNone(shipped_shape, "the proto itself is fine")
        self.assertIn("keyflight: invalid plugin configuration: policies[0].lease_ms", with_the_module)

    def test_an_unquoted_digest_is_refused(self):
        # YAML reads an all-digit sha256 as a number, as kubectl does; the proto wants a string.
        doc = shipped_enforce()
        extension(doc)["vm_config"]["code"]["remote"]["sha256"] = 0
        self.assertIn("sha256", reasons(doc, 0)[0])

    def test_a_misspelled_http_filter_field_is_refused(self):
        doc = shipped_enforce()
        source = doc["spec"]["configPatches"][1]["patch"]["value"]["config_discovery"]["config_source"]
        source["initial_fetch_timout"] = source.pop("initial_fetch_timeout")
        (reason,) = reasons(doc, 1)
        self.assertIn("initial_fetch_timout", reason)

    def test_a_misspelled_listener_field_is_refused(self):
        doc = shipped_enforce()
        value = doc["spec"]["configPatches"][2]["patch"]["value"]
        value["per_connection_buffer_limit_byte"] = value.pop("per_connection_buffer_limit_bytes")
        (reason,) = reasons(doc, 2)
        self.assertIn("per_connection_buffer_limit_byte", reason)

    def test_a_cluster_patch_is_embedded_and_checked(self):
        patch = {"applyTo": "CLUSTER", "patch": {"operation": "MERGE", "value": {"conect_timeout": "1s"}}}
        (reason,) = [envoy_patches.validate(ENVOY, json.dumps(c)) for _, c in envoy_patches.bootstraps_for(patch, WASM)]
        self.assertIn("conect_timeout", reason)
        patch["patch"]["value"] = {"connect_timeout": "2s"}
        (reason,) = [envoy_patches.validate(ENVOY, json.dumps(c)) for _, c in envoy_patches.bootstraps_for(patch, WASM)]
        self.assertIsNone(reason)


class Placement(unittest.TestCase):
    def test_a_patch_that_cannot_be_placed_fails_instead_of_passing(self):
        patch = {"applyTo": "BOOTSTRAP", "patch": {"operation": "MERGE", "value": {}}}
        with self.assertRaises(envoy_patches.Unplaceable):
            envoy_patches.bootstraps_for(patch, WASM)

    def test_merge_follows_proto_semantics(self):
        merged = envoy_patches.merge({"a": {"b": 1, "c": [1]}, "d": 1}, {"a": {"c": [2]}, "d": 2})
        self.assertEqual(merged, {"a": {"b": 1, "c": [1, 2]}, "d": 2})

    def test_the_agent_rewrite_points_at_the_local_module(self):
        value = copy.deepcopy(shipped_enforce()["spec"]["configPatches"][0]["patch"]["value"])
        code = envoy_patches.agent_rewrite(value, WASM)["typed_config"]["config"]["vm_config"]["code"]
        self.assertEqual(code, {"local": {"filename": str(WASM)}})


if __name__ == "__main__":
    unittest.main()
