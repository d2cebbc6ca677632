"""Alert policies and the dashboard for Cloud Monitoring, as code: templates/monitoring/*.json.

The JSON files are the Cloud Monitoring API's own resources (AlertPolicy, Dashboard) with
`${VARIABLE}` placeholders named after DeployConfig's environment variables, so every
threshold, job name and subscription comes from the deploy configuration. A string that is a
placeholder and nothing else becomes the setting's value with its type (thresholds stay
numbers; NOTIFICATION_CHANNELS becomes a list of channel names); placeholders inside longer
strings are substituted as text.

    upvotes deploy alerts [--dry-run]   renders them into .upvotes/monitoring/, then creates
                                        each policy and the dashboard with gcloud
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from upvotes.deploy.deploy_config import REPO_ROOT, DeployConfig
from upvotes.deploy.gcloud_steps import Step

TEMPLATE_DIR = REPO_ROOT / "templates" / "monitoring"
RENDERED_DIR = Path(".upvotes") / "monitoring"  # relative to the repository root, where the steps run
PLACEHOLDER = re.compile(r"\$\{([A-Z_]+)\}")


def alert_templates(directory: Path = TEMPLATE_DIR) -> list[Path]:
    return sorted(directory.glob("alert-*.json"))


def dashboard_templates(directory: Path = TEMPLATE_DIR) -> list[Path]:
    return sorted(directory.glob("dashboard*.json"))


def placeholder_values(cfg: DeployConfig) -> dict[str, object]:
    """Every value a template may name, by environment variable."""
    values: dict[str, object] = {f.metadata["env"]: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    values["DEAD_LETTER_SUBSCRIPTION"] = cfg.dead_letter_subscription
    values["NOTIFICATION_CHANNELS"] = [
        channel if channel.startswith("projects/") else f"projects/{cfg.project}/notificationChannels/{channel}"
        for channel in (c.strip() for c in cfg.notification_channels.split(","))
        if channel
    ]
    return values


def render(template: object, values: dict[str, object]) -> object:
    """`template` with its placeholders replaced; KeyError names a placeholder with no value."""
    if isinstance(template, dict):
        return {key: render(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [render(item, values) for item in template]
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template)
        if whole:
            return values[whole.group(1)]
        return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    return template


def rendered_files(cfg: DeployConfig) -> dict[Path, str]:
    """Each rendered policy and dashboard (path relative to the repository root) and its JSON."""
    values = placeholder_values(cfg)
    return {
        RENDERED_DIR / path.name: json.dumps(render(json.loads(path.read_text(encoding="utf-8")), values), indent=2)
        + "\n"
        for path in alert_templates() + dashboard_templates()
    }


def write_rendered(cfg: DeployConfig, root: Path = REPO_ROOT) -> list[Path]:
    written = []
    for relative, text in rendered_files(cfg).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def alert_steps(cfg: DeployConfig) -> list[Step]:
    """One gcloud command per alert policy and one for the dashboard (files rendered first).
    Creating again adds a second copy: delete the old ones first (`gcloud alpha monitoring
    policies list`), as templates/README.md says."""
    p = ["--project", cfg.project]
    steps = [
        Step(
            [
                "gcloud",
                "alpha",
                "monitoring",
                "policies",
                "create",
                f"--policy-from-file={RENDERED_DIR / path.name}",
                *p,
            ],
            f"alert policy {path.stem}, thresholds from the deploy settings",
        )
        for path in alert_templates()
    ]
    steps += [
        Step(
            ["gcloud", "monitoring", "dashboards", "create", f"--config-from-file={RENDERED_DIR / path.name}", *p],
            "the operations dashboard",
        )
        for path in dashboard_templates()
    ]
    return steps
