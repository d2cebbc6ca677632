"""Offline checks of the Cloud Monitoring alert policies and dashboard (templates/monitoring):
every filter and query names a real metric type, every threshold comes from the deploy
configuration, and `upvotes deploy alerts --dry-run` prints the gcloud commands."""

from __future__ import annotations

import argparse
import io
import json
import re
import shlex

import pytest

from upvotes.commands import deploy as deploy_command
from upvotes.deploy import gcloud_steps, monitoring
from upvotes.deploy.deploy_config import DeployConfig

# Metric types as Cloud Monitoring exports them (Dataflow and Pub/Sub metric lists; custom Beam
# counters arrive as dataflow.googleapis.com/job/user_counter with a metric_name label).
REAL_METRIC_TYPES = {
    "dataflow.googleapis.com/job/data_watermark_age",  # data freshness
    "dataflow.googleapis.com/job/system_lag",
    "dataflow.googleapis.com/job/elapsed_time",
    "dataflow.googleapis.com/job/is_failed",
    "dataflow.googleapis.com/job/user_counter",
    "pubsub.googleapis.com/subscription/num_undelivered_messages",
}
# Beam counters of this project that the policies and dashboard name (spanner_writes/sinks.py,
# transforms/fold_deltas.py, and the lateness counters of transforms/windowing.py and parse_and_sum.py).
SINK_COUNTERS = {"rows_written", "transient_retries", "rows_dead_lettered"}
FOLD_COUNTERS = {"oldest_unfolded_age_s"}
LATENESS_COUNTERS = {
    ("WindowAndSumVotes", "late_events", "windowing"),
    ("ParseVotes", "stamped_ahead_of_worker_clock", "parse_and_sum"),
}
CUSTOM = {
    "ALERT_FOLD_LAG_S": "1234",
    "ALERT_DEAD_LETTERS": "7",
    "ALERT_DATA_FRESHNESS_S": "321",
    "ALERT_SYSTEM_LAG_S": "456",
    "ALERT_SINK_RETRIES_PER_MIN": "89",
    "ALERT_DURATION_S": "240",
    "ALERT_UNFOLDED_AGE_S": "86400",
    "ALERT_LATE_VOTES_PER_MIN": "5",
    "STREAMING_JOB": "stream-x",
    "FOLD_JOB": "fold-y",
    "DEAD_LETTER_TOPIC": "dl-z",
    "NOTIFICATION_CHANNELS": "111, projects/p/notificationChannels/222",
}
TEMPLATES = monitoring.alert_templates() + monitoring.dashboard_templates()


def config() -> DeployConfig:
    return DeployConfig.from_env({"PROJECT": "my-project", **CUSTOM}).validate()


def metric_texts(node: object) -> list[str]:
    """Every filter and PromQL query in a policy or dashboard."""
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in ("filter", "query", "prometheusQuery") and isinstance(v, str)]
        return found + [t for v in node.values() for t in metric_texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in metric_texts(v)]
    return []


def metric_types(text: str) -> set[str]:
    return set(re.findall(r'metric\.type = "([^"]+)"', text)) | set(re.findall(r'"__name__"="([^"]+)"', text))


def rendered(path) -> dict:
    policy = monitoring.render(json.loads(path.read_text()), monitoring.placeholder_values(config()))
    assert isinstance(policy, dict)
    return policy


def test_the_alerts_and_the_dashboard_exist_with_the_names_asked_for() -> None:
    names = {p.stem for p in TEMPLATES}
    assert names == {
        "alert-fold-lag",
        "alert-fold-failures",
        "alert-dead-letter-backlog",
        "alert-streaming-lag",
        "alert-sink-retries",
        "alert-unfolded-age",
        "alert-late-votes",
        "dashboard",
    }


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_every_filter_and_query_names_a_real_metric_type(path) -> None:
    texts = metric_texts(rendered(path))
    assert texts
    for text in texts:
        types = metric_types(text)
        assert types and types <= REAL_METRIC_TYPES, text
        if "user_counter" in text:  # a custom Beam counter: it must be one the sink or the fold reports
            named = {n for names in re.findall(r'"metric_name"=~?"([^"]+)"', text) for n in names.split("|")}
            assert named and named <= SINK_COUNTERS | FOLD_COUNTERS | {n for _, n, _ in LATENESS_COUNTERS}, named


@pytest.mark.parametrize("path", monitoring.alert_templates(), ids=lambda p: p.stem)
def test_every_threshold_comes_from_the_deploy_configuration(path) -> None:
    template = json.loads(path.read_text())
    policy = rendered(path)
    for raw, condition in zip(template["conditions"], policy["conditions"]):
        (kind,) = [k for k in raw if k.startswith("condition")]
        if "thresholdValue" in raw[kind]:
            if "is_failed" in raw[kind]["filter"]:
                assert raw[kind]["thresholdValue"] == 0  # any failure; nothing to tune
            else:
                match = re.fullmatch(r"\$\{([A-Z_]+)\}", raw[kind]["thresholdValue"])
                assert match is not None, raw[kind]
                placeholder = match.group(1)
                assert condition[kind]["thresholdValue"] == int(CUSTOM[placeholder])
        if kind == "conditionPrometheusQueryLanguage":
            match = re.search(r"> \$\{([A-Z_]+)\}$", raw[kind]["query"])
            assert match is not None, raw[kind]
            placeholder = match.group(1)
            assert condition[kind]["query"].endswith(f"> {CUSTOM[placeholder]}")
        duration = raw[kind]["duration"]
        assert duration == "0s" or re.fullmatch(r"\$\{[A-Z_]+\}s", duration), "a hard-coded duration"
    assert policy["notificationChannels"] == [
        "projects/my-project/notificationChannels/111",
        "projects/p/notificationChannels/222",
    ]
    assert "${" not in json.dumps(policy)


def test_fold_lag_and_dead_letter_alerts_watch_the_configured_jobs_and_subscription() -> None:
    by_name = {p.stem: rendered(p) for p in monitoring.alert_templates()}
    assert by_name["alert-fold-lag"]["conditions"][0]["conditionAbsent"]["duration"] == "1234s"
    assert 'job_name = "fold-y"' in by_name["alert-fold-lag"]["conditions"][0]["conditionAbsent"]["filter"]
    assert (
        'subscription_id = "dl-z-kept"'
        in by_name["alert-dead-letter-backlog"]["conditions"][0]["conditionThreshold"]["filter"]
    )
    assert all('"stream-x"' in t for t in metric_texts(by_name["alert-streaming-lag"]))


def test_status_uses_the_fold_lag_threshold_of_the_deploy_configuration() -> None:
    from upvotes.commands import status

    parser = argparse.ArgumentParser()
    status.add_arguments(parser)
    assert parser.parse_args(["--instance", "i", "--database", "d"]).max_fold_lag_s == DeployConfig().alert_fold_lag_s


def test_deploy_alerts_dry_run_prints_one_command_per_policy_and_the_dashboard(monkeypatch, tmp_path) -> None:
    for name, value in {"PROJECT": "my-project", **CUSTOM}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(gcloud_steps.subprocess, "run", lambda *a, **k: pytest.fail("--dry-run ran a command"))
    parser = argparse.ArgumentParser()
    deploy_command.add_arguments(parser)
    out = io.StringIO()
    assert deploy_command.run(parser.parse_args(["alerts", "--dry-run", "--root", str(tmp_path)]), out=out) == 0
    commands = [shlex.split(line) for line in out.getvalue().splitlines() if line and not line.startswith("#")]
    policies = [c for c in commands if c[:5] == ["gcloud", "alpha", "monitoring", "policies", "create"]]
    dashboards = [c for c in commands if c[:4] == ["gcloud", "monitoring", "dashboards", "create"]]
    assert len(policies) == len(monitoring.alert_templates()) and len(dashboards) == 1
    for command in policies + dashboards:
        (file_flag,) = [a for a in command if a.startswith(("--policy-from-file=", "--config-from-file="))]
        written = json.loads((tmp_path / file_flag.split("=", 1)[1]).read_text())
        assert "${" not in json.dumps(written) and command[-2:] == ["--project", "my-project"]


def test_the_unfolded_age_alert_watches_the_folds_own_counter() -> None:
    from pathlib import Path

    from transforms import fold_deltas

    (alert,) = [rendered(p) for p in monitoring.alert_templates() if p.stem == "alert-unfolded-age"]
    (query,) = metric_texts(alert)
    assert '"metric_name"="oldest_unfolded_age_s"' in query and '"job_name"="fold-y"' in query
    assert query.endswith("> 86400")
    assert 'Metrics.counter("FoldDeltas", "oldest_unfolded_age_s")' in Path(fold_deltas.__file__).read_text()


def test_the_counters_named_are_the_sinks_own() -> None:
    from dataclasses import astuple

    from spanner_writes.sinks import DELTA_ROWS

    assert DELTA_ROWS.step == "WriteDeltaRows" and SINK_COUNTERS <= set(astuple(DELTA_ROWS.metrics))


def test_the_late_votes_alert_watches_the_lateness_counters_of_the_streaming_job() -> None:
    from pathlib import Path

    import transforms

    (alert,) = [rendered(p) for p in monitoring.alert_templates() if p.stem == "alert-late-votes"]
    (query,) = metric_texts(alert)
    assert '"metric_name"=~"late_events|stamped_ahead_of_worker_clock"' in query and '"job_name"="stream-x"' in query
    assert query.endswith("> 5")
    for namespace, name, module in LATENESS_COUNTERS:
        source = (Path(transforms.__file__).parent / f"{module}.py").read_text(encoding="utf-8")
        assert f'"{namespace}", "{name}")' in source
