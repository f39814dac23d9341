"""``encode_record``'s msgspec fast path writes the same JSON values as ``json.dumps``, and hands
every record msgspec would write differently (NaN, bytes, tuples, odd keys, surrogates) to the
``json`` path, byte for byte what it wrote before."""

from __future__ import annotations

import json
import random

from verifiers.utils.results import _fast_encode, dumps, encode_record


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-(2**70), 2**70)
    if kind == 2:
        return rng.uniform(-1e6, 1e6) * rng.choice([1, 1e-9, 1e12])
    if kind == 3:
        return "".join(rng.choice('ab"\\\n\té€😀\x00') for _ in range(rng.randrange(6)))
    if kind == 4:
        return rng.randrange(-5, 5)
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}{rng.choice('xé')}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


def test_plain_records_take_the_fast_path_with_the_same_json_values():
    rng = random.Random(19)
    fast = 0
    for _ in range(2000):
        record = {"example_id": rng.randrange(100), "data": _random_value(rng)}
        line = encode_record(dict(record))
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert json.loads(line) == json.loads(dumps(record))
        fast += _fast_encode(record) is not None
    assert fast == 2000  # JSON's own types only: every one was encoded by msgspec


def test_records_msgspec_would_write_differently_go_through_json():
    odd = [
        {"reward": float("nan")},
        {"x": [1.0, float("inf")]},
        {"blob": b"\x00\x01"},
        {"pair": (1, 2)},
        {1: "int key"},
        {"s": {1, 2}},
    ]
    for record in odd:
        assert _fast_encode(record) is None, record
        assert encode_record(dict(record)) == dumps(record).encode() + b"\n"


def test_a_lone_surrogate_is_still_saved_with_an_error():
    record = {"reward": 1.0, "text": "bad \ud800"}
    line = encode_record(record)
    saved = json.loads(line)
    assert saved["error"]["type"] == "UnicodeEncodeError" and saved["error"]["source"] == "save"
