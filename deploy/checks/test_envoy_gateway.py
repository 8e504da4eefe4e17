"""envoy_gateway.py refuses a broken Envoy Gateway example (run by scripts/validate-manifests.sh).

Needs KEYFLIGHT_ENVOY (the Envoy binary) and KEYFLIGHT_NATIVE_MODULE (the built native
module) in the environment, as the script sets them. Each test breaks the shipped example in
one way (the script itself checks that the unbroken one passes).
"""

import os
import pathlib
import tempfile
import unittest

import yaml

import crd_schema
import envoy_gateway

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENVOY = os.environ.get("KEYFLIGHT_ENVOY", "")
MODULE = pathlib.Path(os.environ.get("KEYFLIGHT_NATIVE_MODULE", ROOT / "target/debug/libkeyflight_filter_native.so"))


def shipped():
    docs = []
    for path in sorted((ROOT / "deploy/envoy-gateway").glob("*.yaml")):
        with path.open() as f:
            docs.extend(d for d in yaml.load_all(f, Loader=crd_schema.StrictLoader) if d)
    return docs


def of_kind(docs, kind):
    return next(d for d in docs if d["kind"] == kind)


def refusal(docs):
    """envoy_gateway.py's refusal of `docs`, or None when it accepts them."""
    with tempfile.TemporaryDirectory() as work:
        path = pathlib.Path(work) / "example.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        try:
            envoy_gateway.main(ENVOY, str(MODULE), [str(path)])
        except envoy_gateway.Failure as e:
            return str(e)
    return None


@unittest.skipUnless(ENVOY and MODULE.is_file(), "needs KEYFLIGHT_ENVOY and the built native module")
class RefusesBrokenExamples(unittest.TestCase):
    def test_a_module_no_envoy_proxy_registers(self):
        docs = shipped()
        of_kind(docs, "EnvoyExtensionPolicy")["spec"]["dynamicModule"][0]["name"] = "other"
        self.assertIn("registered in no EnvoyProxy", refusal(docs))

    def test_a_patch_adding_another_cluster_than_it_names(self):
        docs = shipped()
        of_kind(docs, "EnvoyPatchPolicy")["spec"]["jsonPatches"][0]["operation"]["value"]["name"] = "x"
        self.assertIn("the patch is named", refusal(docs))

    def test_a_plugin_json_the_module_refuses(self):
        docs = shipped()
        config = of_kind(docs, "EnvoyExtensionPolicy")["spec"]["dynamicModule"][0]["config"]
        config["lease_store"]["timeout_ms"] = 0
        self.assertIn("lease_store.timeout_ms", refusal(docs))

    def test_a_cluster_envoy_refuses(self):
        docs = shipped()
        of_kind(docs, "EnvoyPatchPolicy")["spec"]["jsonPatches"][0]["operation"]["value"]["type"] = "NO_SUCH"
        self.assertIn("Envoy refused", refusal(docs))


if __name__ == "__main__":
    unittest.main()
