"""`hetgen explain --format json` (issue 23, item 7): real outputs validate against the documented
schema (`hetgen schema --explain`, docs/explain-json.md), every time is rounded to 1 ns, and the
costs add up: each alternative's cost_us is its group's compared_us plus its delta_us, the sums are
the sums of their printed parts, and the total (devices concurrent) is at most their sum."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from hetgen.cli import main
from hetgen.frontend import import_model
from hetgen.partition.explain import US_DECIMALS, explain_json
from hetgen.partition.explain_schema import EXPLAIN_SCHEMA
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform

jsonschema = pytest.importorskip("jsonschema")
REPO = Path(__file__).resolve().parent.parent
CASES = [("resnet_tiny.onnx", "soc"), ("transformer_tiny.onnx", "soc"), ("resnet8_int8.onnx", "dual")]
STEP = 10.0**-US_DECIMALS


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-{p}" for m, p in CASES])
def document(request) -> dict:
    model, platform = request.param
    graph = import_model(onnx.load(REPO / "examples" / model))
    return explain_json(place(graph, load_platform(str(REPO / "platforms" / f"{platform}.yaml"))), graph)


def times(value, key=""):
    """Every (field, number) of the document that is a time."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from times(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from times(v, key)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and (key == "us" or key.endswith("_us")):
        yield key, value


def test_real_outputs_validate_against_the_schema(document):
    jsonschema.Draft202012Validator.check_schema(EXPLAIN_SCHEMA)
    errors = list(jsonschema.Draft202012Validator(EXPLAIN_SCHEMA).iter_errors(document))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert any(g["alternatives"] for g in document["groups"])
    # the schema is strict: a field it does not know fails
    bad = {**document, "groups": [{**document["groups"][0], "extra_us": 1.0}]}
    assert list(jsonschema.Draft202012Validator(EXPLAIN_SCHEMA).iter_errors(bad))


def test_times_are_rounded_and_costs_add_up(document):
    found = list(times(document))
    assert len(found) > 10
    for key, value in found:
        assert abs(value / STEP - round(value / STEP)) < 1e-6, (key, value)
    groups = document["groups"]
    for g in groups:
        for a in g["alternatives"]:
            assert round(g["compared_us"] + a["delta_us"], US_DECIMALS) == a["cost_us"], (g["name"], a)
        costs = [a["cost_us"] for a in g["alternatives"]]
        assert costs == sorted(costs)  # the runner-up first
        assert g["transfer_us"] == g["copies"]["us"] == round(sum(t["cost_us"] for t in g["transfers"]), US_DECIMALS)
        assert g["launch_us"] <= g["cost_us"] + STEP
    assert document["group_us"] == round(sum(g["cost_us"] for g in groups), US_DECIMALS)
    assert document["launch_us"] == round(sum(g["launch_us"] for g in groups), US_DECIMALS)
    assert document["transfer_us"] == round(sum(t["cost_us"] for t in document["transfers"]), US_DECIMALS)
    assert document["transfer_us"] == pytest.approx(sum(g["transfer_us"] for g in groups), abs=len(groups) * STEP)
    assert 0 < document["total_us"] <= document["group_us"] + document["transfer_us"] + STEP


def test_hetgen_schema_explain_prints_the_schema(capsys):
    assert main(["schema", "--explain"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(EXPLAIN_SCHEMA))
