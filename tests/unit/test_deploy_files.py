"""The deployment files, checked as far as possible without a container engine.

* ``docker-compose.yml`` parses; every jobserver service runs a real ``jobserver``
  command (the CLI's own parser), and every ``JOBSERVER_*`` variable it sets is a real
  config key that validates (for each scheduler mode the one variable can choose);
  no secret is baked in; each node has its own id and address.
* ``deploy/prometheus/prometheus.yml`` scrapes every node service on its own address,
  with the token file compose mounts; its rule files exist.
* Every PromQL expression of the Grafana dashboard and the alert rules names only
  metrics the code exports (collected from the metric classes themselves).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from jobserver.cli import _parser
from jobserver.config import Config, load_config
from jobserver.metrics import ApiMetrics, NodeMetrics, StoreCollector

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "jobserver.json"
GRAFANA_PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
#: Series Prometheus makes itself.
PROMETHEUS_BUILTINS = {"up"}
#: JOBSERVER_* variables the CLI reads that are not config keys.
NON_CONFIG_VARIABLES = {"JOBSERVER_CONFIG", "JOBSERVER_LOG_FORMAT", "JOBSERVER_URL",
                        "JOBSERVER_TOKEN"}


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def jobserver_services() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in compose()["services"].items()
            if (service.get("command") or [None])[0] == "jobserver"}


def node_services() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in jobserver_services().items()
            if _parser().parse_args(service["command"][1:]).command == "serve"}


# -- compose interpolation ------------------------------------------------------------------
INTERPOLATION = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}`` with ``variables``;
    a required variable that is not given fails like compose does."""
    def replace(match: re.Match[str]) -> str:
        name, operator, argument = match.groups()
        if name in variables:
            return variables[name]
        if operator and operator.endswith("-"):
            return argument
        if operator and operator.endswith("?"):
            raise AssertionError(f"compose would refuse to start: {name}: {argument}")
        return ""

    return INTERPOLATION.sub(replace, str(value))


SECRETS = {"JOBSERVER_TOKEN": "t" * 40, "POSTGRES_PASSWORD": "p" * 20,
           "GRAFANA_ADMIN_PASSWORD": "g" * 20}


def environment(service: dict[str, Any], **variables: str) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: interpolate(value, {**SECRETS, **variables}) for key, value in env.items()}


def is_config_key(variable: str) -> bool:
    """Does ``JOBSERVER_A__B`` (or ``JOBSERVER_TOP``) name a field of :class:`Config`?"""
    if not variable.startswith("JOBSERVER_"):
        return False
    keys = [part.lower() for part in variable[len("JOBSERVER_"):].split("__")]
    model: Any = Config
    for key in keys:
        fields = getattr(model, "model_fields", None)
        if not fields or key not in fields:
            return False
        model = fields[key].annotation
    return not hasattr(model, "model_fields")  # a value, not a whole section


# -- compose ------------------------------------------------------------------------------
def test_compose_has_the_whole_stack() -> None:
    services = compose()["services"]
    assert {"postgres", "zookeeper", "prometheus", "grafana"} <= set(services)
    assert len(node_services()) == 3, sorted(node_services())
    assert (ROOT / "Dockerfile").exists()
    for name, service in jobserver_services().items():
        assert service.get("build") == "." and service.get("image"), name


def test_every_service_command_is_a_real_jobserver_command() -> None:
    services = jobserver_services()
    assert services
    commands = set()
    for name, service in services.items():
        try:
            args = _parser().parse_args(service["command"][1:])
        except SystemExit:
            pytest.fail(f"{name}: {service['command']} is not a valid jobserver command")
        commands.add(args.command)
    assert {"serve", "db"} <= commands


@pytest.mark.parametrize("mode", ["single", "distributed", "leader", "2"])
def test_every_jobserver_variable_is_a_valid_config_key(mode: str) -> None:
    for name, service in jobserver_services().items():
        env = environment(service, JOBSERVER_MODE=mode)
        for variable in env:
            if variable.startswith("JOBSERVER_"):
                assert is_config_key(variable) or variable in NON_CONFIG_VARIABLES, (
                    f"{name}: {variable} is not a config key")
        config = load_config(environ=env)  # raises ConfigError naming a bad key
        if name in node_services():
            assert config.scheduler.mode.value == {"2": "distributed"}.get(mode, mode)
            assert config.api.tokens == [SECRETS["JOBSERVER_TOKEN"]]
            assert config.database_url.startswith("postgresql://jobserver:")
            assert config.lock.backend == "zookeeper"


def test_the_checks_catch_a_bad_key() -> None:
    assert is_config_key("JOBSERVER_SCHEDULER__MODE") and is_config_key("JOBSERVER_DATA_DIR")
    assert not is_config_key("JOBSERVER_SCHEDULER__MOOD")
    assert not is_config_key("JOBSERVER_SCHEDULER")  # a section, not a value
    with pytest.raises(AssertionError, match="compose would refuse"):
        interpolate("${NOT_SET:?set it}", {})
    assert interpolate("${A:-x}-${B}", {"B": "y"}) == "x-y"


def test_one_variable_picks_the_mode_of_every_node() -> None:
    raw = {name: service["environment"]["JOBSERVER_SCHEDULER__MODE"]
           for name, service in node_services().items()}
    assert set(raw.values()) == {"${JOBSERVER_MODE:-single}"}, raw
    for mode in ("single", "distributed", "leader"):
        modes = {load_config(environ=environment(s, JOBSERVER_MODE=mode)).scheduler.mode.value
                 for s in node_services().values()}
        assert modes == {mode}


def test_no_secret_is_baked_in() -> None:
    text = COMPOSE.read_text()
    for name, service in node_services().items():
        tokens = service["environment"]["JOBSERVER_API__TOKENS"]
        assert re.fullmatch(r"\$\{JOBSERVER_TOKEN:\?[^}]+\}", tokens), (name, tokens)
        with pytest.raises(AssertionError, match="JOBSERVER_TOKEN"):
            interpolate(tokens, {})  # unset: compose refuses to start
    for variable in ("POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD"):
        assert re.search(rf"\$\{{{variable}:\?", text), variable
        assert not re.search(rf"\$\{{{variable}:-", text), variable
    assert compose()["secrets"]["jobserver_token"] == {"environment": "JOBSERVER_TOKEN"}
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".env" in ignored and ".git" in ignored


def test_nodes_have_their_own_id_and_address() -> None:
    nodes = node_services()
    ids = [environment(s)["JOBSERVER_SERVER__ID"] for s in nodes.values()]
    assert sorted(ids) == sorted(nodes), ids  # the service name is the node id
    for service in nodes.values():
        assert environment(service)["JOBSERVER_API__BIND"] == "0.0.0.0:8080"
    published = [port for s in nodes.values() for port in s.get("ports", [])]
    assert len(set(published)) == len(nodes), published


# -- Prometheus ------------------------------------------------------------------------------
def container_path(service: dict[str, Any], host: Path) -> str | None:
    """Where compose mounts ``host`` (a file, or a file inside a mounted folder)."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        source_path = (ROOT / source).resolve()
        if source_path == host.resolve():
            return target
        if host.resolve().is_relative_to(source_path) and source.startswith("."):
            return target + "/" + str(host.resolve().relative_to(source_path))
    return None


def test_prometheus_scrapes_every_node_on_its_own_address() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    services = compose()["services"]
    prometheus = services["prometheus"]
    assert container_path(prometheus, PROMETHEUS) == "/etc/prometheus/prometheus.yml"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs["jobserver"]
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    expected = [f"{name}:{environment(s)['JOBSERVER_API__BIND'].rsplit(':', 1)[1]}"
                for name, s in node_services().items()]
    assert sorted(targets) == sorted(expected)
    assert job["metrics_path"] == "/metrics"
    # The bearer token: a file compose mounts from the token's secret.
    auth = job["authorization"]
    assert auth.get("type", "Bearer") == "Bearer" and "credentials" not in auth
    secret = auth["credentials_file"].removeprefix("/run/secrets/")
    assert secret in prometheus["secrets"] and secret in compose()["secrets"]
    for rule_file in config["rule_files"]:
        assert rule_file == container_path(prometheus, ALERTS), rule_file


# -- PromQL ----------------------------------------------------------------------------------
def exported_metrics() -> set[str]:
    """Every series name the code can export, by metric type."""
    registry = CollectorRegistry()
    NodeMetrics(registry)
    ApiMetrics(registry)

    class FakeStore:
        class jobs:  # noqa: N801
            @staticmethod
            def count_by_state() -> dict[str, int]:
                return {}

        class servers:  # noqa: N801
            @staticmethod
            def list() -> list[Any]:
                return []

        class consumers:  # noqa: N801
            @staticmethod
            def all(lag_cap: int | None = None) -> list[Any]:
                return []

        class views:  # noqa: N801
            @staticmethod
            def counts_by_state() -> dict[str, int]:
                return {}

        class batches:  # noqa: N801
            @staticmethod
            def progress() -> list[Any]:
                return [("ORDER", "IN", None, 0)]

    families = list(registry.collect()) + list(StoreCollector(FakeStore, 10.0).collect())
    suffixes = {"counter": ("_total", "_created"), "gauge": ("",),
                "histogram": ("_bucket", "_sum", "_count", "_created")}
    names = {family.name + suffix for family in families for suffix in suffixes[family.type]}
    assert "jobserver_jobs_finished_total" in names and "jobserver_jobs" in names
    return names


KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not functions, labels or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    names = set()
    for name, call in re.findall(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", text):
        if not call and name not in KEYWORDS:
            names.add(name)
    return names


def test_the_metric_name_extractor() -> None:
    expr = ('histogram_quantile(0.95, sum by (le, kind) (rate(jobserver_lock_acquire_seconds_'
            'bucket{kind="global"}[$__rate_interval]))) > 1 and on (instance) '
            'deriv(max(jobserver_jobs{state="READY"})[15m:1m]) > 0 or vector(0) '
            'unless up offset 5m')
    assert metric_names(expr) == {"jobserver_lock_acquire_seconds_bucket", "jobserver_jobs",
                                  "up"}
    known = exported_metrics() | PROMETHEUS_BUILTINS
    assert metric_names("rate(jobserver_nope_total[5m])") - known == {"jobserver_nope_total"}


def dashboard_exprs() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                found.append((panel["title"], target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    return found


def alert_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_query_names_only_exported_metrics(source: str) -> None:
    exprs = dashboard_exprs() if source == "dashboard" else alert_exprs()
    assert exprs
    known = exported_metrics() | PROMETHEUS_BUILTINS
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, f"{title}: {expr!r} names no metric"
        assert names <= known, f"{title}: unknown metric(s) {names - known} in {expr!r}"


def test_dashboard_shows_what_operators_need() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Throughput", "Queue depth", "Latency", "Failures", "Nodes",
                    "Leadership and failovers", "Locks", "Scheduling listeners", "Schedules",
                    "Datasets", "Views"]
    exprs = " ".join(expr for _, expr in dashboard_exprs())
    for needed in ("jobserver_jobs_finished_total", 'jobserver_jobs{state="READY"}',
                   "histogram_quantile(0.99, sum by (le) (rate(jobserver_dispatch_latency",
                   'jobserver_jobs_finished_total{state="ERROR"}',
                   "sum by (instance) (jobserver_running_jobs)",
                   "jobserver_scheduler_active", "jobserver_failovers_total",
                   "jobserver_lock_acquire_seconds_bucket",
                   "jobserver_schedule_launch_lag_seconds_bucket",
                   "jobserver_schedule_fire_times_skipped_total", "jobserver_consumer_lag",
                   "jobserver_consumer_partitions_failed_total",
                   "jobserver_view_partitions"):
        assert needed in exprs, needed
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    # Every panel's data source is the provisioned one.
    datasources = yaml.safe_load((GRAFANA_PROVISIONING / "datasources" /
                                  "prometheus.yml").read_text())["datasources"]
    uids = {ds["uid"] for ds in datasources}
    assert datasources[0]["url"] == "http://prometheus:9090"
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] in uids, panel["title"]


def test_alerts_cover_the_required_cases() -> None:
    names = {name for name, _ in alert_exprs()}
    assert {"JobserverNoActiveScheduler", "JobserverQueueGrowing", "JobserverJobsStuck",
            "JobserverNodeDead"} <= names


def test_grafana_provisioning_matches_the_compose_mounts() -> None:
    grafana = compose()["services"]["grafana"]
    provider = yaml.safe_load((GRAFANA_PROVISIONING / "dashboards" /
                               "jobserver.yml").read_text())["providers"][0]
    dashboard_path = container_path(grafana, DASHBOARD)
    assert dashboard_path and dashboard_path.rsplit("/", 1)[0] == provider["options"]["path"]
    assert container_path(grafana, GRAFANA_PROVISIONING) == "/etc/grafana/provisioning"
