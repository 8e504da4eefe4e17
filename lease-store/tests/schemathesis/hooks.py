"""schemathesis hooks for lease-store/tests/http/openapi_conformance.rs.

A claim's record must be kept at least as long as its lease (docs/records.md#retention-and-cleanup):
the store answers 400 to a `retention_s` shorter than `lease_ms`. That rule ties two fields,
which JSON Schema cannot say, so a schema-valid claim that breaks it is not generated as a
valid one; every other rejection of valid data is still a failure.
"""

import schemathesis


def _retention_shorter_than_the_lease(body):
    if not isinstance(body, dict):
        return False
    retention_s, lease_ms = body.get("retention_s"), body.get("lease_ms")
    numbers = (int, float)
    return (
        isinstance(retention_s, numbers)
        and isinstance(lease_ms, numbers)
        and not isinstance(retention_s, bool)
        and not isinstance(lease_ms, bool)
        and retention_s * 1000 < lease_ms
    )


@schemathesis.hook
def filter_case(context, case):
    meta = case.meta
    positive = meta is None or meta.generation.mode.is_positive
    return not (positive and _retention_shorter_than_the_lease(case.body))
