"""``verifiers.utils.json_limits``: the one depth and finiteness check the hub's API and the
interception proxy share, on values too deep to recurse over."""

from __future__ import annotations

from verifiers.utils.json_limits import first_non_finite, json_depth


def test_depth_counts_containers_and_stops_past_the_limit() -> None:
    assert [json_depth(v, 32) for v in (1, "x", [], {}, [1, {"a": [2]}], {"a": {"b": {}}})] == [0, 0, 1, 1, 3, 3]
    hostile: list = []
    for _ in range(100_000):  # far past the recursion limit
        hostile = [hostile]
    assert json_depth(hostile, 32) == 33  # counting stopped at the first level past the limit


def test_the_first_number_json_cannot_carry_is_found() -> None:
    assert first_non_finite({"a": [1.0, {"b": 2}], "c": "nan"}) is None
    assert first_non_finite({"a": [1.0, {"b": float("inf")}]}) == float("inf")
    nan = first_non_finite([[float("nan")]])
    assert nan is not None and nan != nan
