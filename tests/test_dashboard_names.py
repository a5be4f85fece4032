"""Every name the Grafana dashboard and the alert rules use is one a live ``/metrics`` exposes, exactly.

A gateway serves streams, whole answers, failures and fallbacks; its scrape then gives every series name (with
its ``_bucket``/``_sum``/``_count``/``_total`` suffix, as Prometheus stores it) and each name's label names.
Each query is parsed as PromQL and walked: a selector's metric must be one of those names (a family name with
the wrong suffix, say ``gateway_ttft_seconds_total``, fails), each matcher's label one that metric carries, each
``by``/``without``/``on``/``ignoring``/``group_left`` label one that reaches that point of the query, and each
``{{label}}`` of a legend one that the query's result keeps. Prometheus adds ``instance`` and ``job`` to every
scraped series; those count as carried.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.fakes import FakeBehavior
from tests.support.clients import sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "gateway.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
TARGET_LABELS = frozenset({"instance", "job"})
"""What Prometheus attaches to every series it scrapes (and all ``up`` has)."""
GRAFANA = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$model": ".*", "$provider": ".*"}
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
LABEL_VALUES = re.compile(r"label_values\((.+), (\w+)\)")

Exposed = dict[str, frozenset[str]]


class QueryError(AssertionError):
    pass


def exposed(text: str) -> Exposed:
    """Every sample name of a scrape → the label names its series carry (with Prometheus's target labels)."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    carried = {name: frozenset(names | TARGET_LABELS) for name, names in labels.items()}
    return {**carried, "up": TARGET_LABELS}  # Prometheus's own series per target


def result_labels(node: Any, names: Exposed) -> frozenset[str]:
    """The label names ``node``'s result carries; raises ``QueryError`` naming what the scrape does not have."""
    if isinstance(node, promql_parser.MatrixSelector):
        return result_labels(node.vector_selector, names)
    if isinstance(node, promql_parser.VectorSelector):
        if node.name not in names:
            raise QueryError(f"{node.name} is not a series of /metrics")
        carried = names[node.name]
        for matcher in node.matchers.matchers:
            if matcher.name != "__name__" and matcher.name not in carried:
                raise QueryError(f"{node.name} has no label {matcher.name!r} (it has {sorted(carried)})")
        return carried
    if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr):
        return result_labels(node.expr, names)
    if isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        return frozenset()
    if isinstance(node, promql_parser.Call):
        carried = frozenset().union(*(result_labels(arg, names) for arg in node.args))
        if node.func.name == "histogram_quantile":
            if "le" not in carried:
                raise QueryError(f"histogram_quantile over a result without 'le': {node}")
            return carried - {"le"}
        return frozenset() if node.func.name in ("scalar", "time", "vector") else carried
    if isinstance(node, promql_parser.AggregateExpr):
        inner = result_labels(node.expr, names)
        modifier = node.modifier
        if modifier is None:
            return frozenset()
        _require(modifier.labels, inner, f"{node.op} {modifier.type}")
        if modifier.type == promql_parser.AggModifierType.By:
            return frozenset(modifier.labels)
        return inner - set(modifier.labels)
    if isinstance(node, promql_parser.BinaryExpr):
        lhs, rhs = result_labels(node.lhs, names), result_labels(node.rhs, names)
        binary = node.modifier
        if binary is not None and binary.matching is not None:
            _require(binary.matching.labels, lhs & rhs, "on/ignoring")  # matching is between two vectors
        if binary is not None and binary.card in (
            promql_parser.VectorMatchCardinality.ManyToOne,
            promql_parser.VectorMatchCardinality.OneToMany,
        ):
            one = rhs if binary.card == promql_parser.VectorMatchCardinality.ManyToOne else lhs
            _require(binary.group_labels or [], one, "group_left/group_right")
        return lhs or rhs
    raise QueryError(f"unexpected PromQL node {type(node).__name__}: {node}")


def _require(wanted: list[str], carried: frozenset[str], where: str) -> None:
    missing = set(wanted) - carried
    if missing:
        raise QueryError(f"{where} ({', '.join(sorted(missing))}) names labels the series do not carry")


def grafana(expr: str) -> str:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    return expr


def dashboard_queries() -> Iterator[tuple[str, str, str | None]]:
    """(where, expr, legend) of every panel target, variable and alert rule."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} [{target.get('refId', '?')}]", target["expr"], target.get("legendFormat")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.fullmatch(variable["definition"])
            assert match, variable["definition"]
            # label_values(selector, label): the selector's result must carry the label listed.
            yield f"variable {variable['name']}", match.group(1), "{{" + match.group(2) + "}}"
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            yield f"alert {rule['alert']}", rule["expr"], None


def check(expr: str, legend: str | None, names: Exposed) -> None:
    carried = result_labels(promql_parser.parse(grafana(expr)), names)
    for label in LEGEND_LABEL.findall(legend or ""):
        if label not in carried:
            raise QueryError(f"legend {{{{{label}}}}} names a label the result does not keep ({sorted(carried)})")


@pytest.fixture
def scraped(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> Exposed:
    good = fakes.start("good", FakeBehavior(ttft_s=0.005, tokens_per_s=2000, output_tokens=16))
    flaky = fakes.start("flaky", FakeBehavior(status=503, error_rate=0.5, seed=3, output_tokens=16))
    gateway = start_gateway(gateway_config([flaky, good], policy={"failure_threshold": 1000}))
    client = sdk(gateway.base_url, api_key="unused")
    for i in range(6):
        messages: Any = [{"role": "user", "content": f"question {i}"}]
        if i % 3 == 0:
            assert client.chat.completions.create(model="m", messages=messages).choices
        else:
            stream = client.chat.completions.create(model="m", messages=messages, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    wait_until(lambda: len(gateway.samples.samples) >= 6, what="samples recorded")
    response = httpx.get(gateway.url + "/metrics")
    assert response.status_code == 200
    return exposed(response.text)


def test_every_query_names_series_and_labels_a_live_scrape_exposes(scraped: Exposed) -> None:
    problems = []
    checked = 0
    for where, expr, legend in dashboard_queries():
        try:
            check(expr, legend, scraped)
        except (QueryError, ValueError) as exc:
            problems.append(f"{where}: {exc}\n    {expr}")
        checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 40


@pytest.mark.parametrize(
    ("expr", "legend", "complaint"),
    [
        ("rate(gateway_ttft_seconds_total[1m])", None, "not a series"),
        ("rate(gateway_requests[1m])", None, "not a series"),
        ('sum(rate(gateway_requests_total{providr="x"}[1m]))', None, "no label 'providr'"),
        ("sum by (deployment) (rate(gateway_requests_total[1m]))", None, "deployment"),
        ("histogram_quantile(0.5, sum by (provider) (rate(gateway_ttft_seconds_bucket[1m])))", None, "'le'"),
        ("sum by (provider) (rate(gateway_requests_total[1m]))", "{{model}}", "legend {{model}}"),
        ("sum(gateway_inflight_requests) / on (model) sum by (model) (gateway_requests_total)", None, "on/ignoring"),
    ],
)
def test_the_check_refuses_what_it_should(scraped: Exposed, expr: str, legend: str | None, complaint: str) -> None:
    # Not a vacuous pass: a wrong suffix, a misspelt or absent label, a lost ``le``, a blank legend all fail.
    with pytest.raises(QueryError, match=re.escape(complaint)):
        check(expr, legend, scraped)
