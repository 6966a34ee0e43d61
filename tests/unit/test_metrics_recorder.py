"""The request recorder's bulk histogram and its schema-driven error counts.

Latency samples are appended per request and bucketed by ``fold``; the
buckets must be what a per-sample ``le`` comparison gives. Error codes are
looked for only where the API's schema can hold an ``error_code``; on a
response with an error in every such place, that must count exactly what a
walk of every value counts.
"""

import random

import pytest

from pluglog.metrics.recorder import LATENCY_BOUNDS_S, ApiStats, RequestMetrics
from pluglog.protocol.apis import APIS

pytestmark = pytest.mark.unit


def reference_buckets(samples):
    buckets = [0] * (len(LATENCY_BOUNDS_S) + 1)
    for value in samples:
        index = next(
            (i for i, bound in enumerate(LATENCY_BOUNDS_S) if value <= bound),
            len(LATENCY_BOUNDS_S),
        )
        buckets[index] += 1
    return buckets


def test_fold_puts_each_sample_in_its_le_bucket():
    stats = ApiStats(0)
    rng = random.Random(7)
    # Every bound exactly (le is inclusive), just above each, and random values
    # up to past the last bound (+Inf).
    samples = list(LATENCY_BOUNDS_S)
    samples += [bound * 1.000001 for bound in LATENCY_BOUNDS_S]
    samples += [rng.uniform(0, 20.0) for _ in range(500)]
    for value in samples:
        stats.observe(value)
    assert stats.count == len(samples)  # pending samples count before a fold
    stats.fold()
    assert stats.pending == []
    assert stats.buckets == reference_buckets(samples)
    assert stats.sum_s == pytest.approx(sum(samples))
    assert stats.count == len(samples)


def test_fold_accumulates_and_observe_stays_bound():
    stats = ApiStats(1)
    observe = stats.observe  # bound once, as the server's fast lane does
    observe(0.00005)
    stats.fold()
    observe(0.3)
    observe(11.0)
    stats.fold()
    stats.fold()  # nothing pending: no change
    assert stats.buckets == reference_buckets([0.00005, 0.3, 11.0])
    assert stats.count == 3


def _every_value_walk(node, counts):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "error_code":
                if value:
                    counts[value] = counts.get(value, 0) + 1
            else:
                _every_value_walk(value, counts)
    elif isinstance(node, list):
        for item in node:
            _every_value_walk(item, counts)


def _filled(fields, code):
    """A response body with two entries in every array and ``code`` in
    every error_code."""
    body = {}
    for field in fields:
        if field.name == "error_code":
            body[field.name] = code
        elif field.is_struct_array:
            body[field.name] = [_filled(field.type, code), _filled(field.type, code)]
        elif field.is_struct:
            body[field.name] = _filled(field.type.fields, code)
        else:
            body[field.name] = 0
    return body


@pytest.mark.parametrize("api_key", sorted(APIS))
def test_error_counts_follow_the_schema(api_key):
    body = _filled(APIS[api_key].response, 42)
    expected = {}
    _every_value_walk(body, expected)
    metrics = RequestMetrics()
    metrics.answered(api_key, {}, body)
    assert {code: n for (key, code), n in metrics.errors.items() if key == api_key} == expected


def test_a_response_without_errors_counts_none():
    metrics = RequestMetrics()
    metrics.answered(3, {}, _filled(APIS[3].response, 0))
    assert metrics.errors == {}
