"""`upvotes deploy`: the whole Google Cloud deployment as plain, printable gcloud commands.

Nothing here talks to Google Cloud until `execute_steps` runs the commands. Every other function
returns data — the gcloud command lines (argv lists), the Cloud Scheduler job (a dict) — so tests
check all of it offline, `upvotes deploy ACTION --dry-run` prints the exact commands, and without
--dry-run the same commands run one after the other, stopping at the first failure.

    upvotes deploy setup       enable APIs; service accounts, bucket, Artifact Registry repository
    upvotes deploy provision   Spanner instance and database, topics and subscriptions
    upvotes deploy iam         least-privilege role bindings for every identity
    upvotes deploy build       one image (launcher + SDK worker) per template, both template specs
    upvotes deploy run         launch the streaming job and one fold
    upvotes deploy schedule    Cloud Scheduler job launching the fold template every N minutes
    upvotes deploy all         all of the above, in that order (after metadata)

The settings are a DeployConfig (upvotes/deploy/deploy_config.py); the template parameters of a launch
and of the scheduler's launch body come from the parameter table in pipeline/params.py.
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from upvotes.deploy.deploy_config import KINDS, PARAMS, REPO_ROOT, DeployConfig

ACTIONS = ("metadata", "setup", "provision", "iam", "build", "run", "schedule", "all", "alerts")

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
DATAFLOW_API = "https://dataflow.googleapis.com/v1b3"

# Everything a project needs switched on, from an empty project to a scheduled fold.
APIS = (
    "dataflow.googleapis.com",
    "compute.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "storage.googleapis.com",
    "pubsub.googleapis.com",
    "spanner.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudscheduler.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)


# --- commands ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One command, with the reason it exists (printed as a comment by --dry-run)."""

    argv: list[str]
    why: str = ""


def template_parameters(cfg: DeployConfig, kind: str) -> dict[str, str]:
    """The launch parameters of `kind` by template name: every required one, and each optional
    one that is set (None leaves the pipeline's default)."""
    values = cfg.param_values()
    return {p.template_name: value for p in PARAMS[kind] if (value := values[p.flag]) is not None}


def setup_steps(cfg: DeployConfig) -> list[Step]:
    p = ["--project", cfg.project]
    steps = [Step(["gcloud", "services", "enable", *APIS, *p], "APIs of every service used below")]
    for account, what in (
        (cfg.worker_sa, "streaming job"),
        (cfg.fold_sa, "fold job"),
        (cfg.publisher_sa, "vote publishers"),
        (cfg.scheduler_sa, "Cloud Scheduler"),
    ):
        if cfg.email(account).endswith(f"@{cfg.project}.iam.gserviceaccount.com"):  # not another project's
            steps.append(
                Step(
                    [
                        "gcloud",
                        "iam",
                        "service-accounts",
                        "create",
                        account.split("@")[0],
                        f"--display-name=upvotes: {what}",
                        *p,
                    ],
                    f"one identity per role, so each gets only what it needs ({what})",
                )
            )
    steps.append(
        Step(
            [
                "gcloud",
                "storage",
                "buckets",
                "create",
                f"gs://{cfg.bucket_name}",
                f"--location={cfg.region}",
                "--uniform-bucket-level-access",
                *p,
            ],
            "template specs, staging and temp files, in the jobs' region",
        )
    )
    steps.append(
        Step(
            [
                "gcloud",
                "artifacts",
                "repositories",
                "create",
                cfg.repository,
                "--repository-format=docker",
                f"--location={cfg.region}",
                *p,
            ],
            "the images: launcher and SDK worker in one",
        )
    )
    return steps


def provision_steps(cfg: DeployConfig) -> list[Step]:
    return [
        Step(
            [
                "upvotes",
                "provision",
                "--project",
                cfg.project,
                "--instance",
                cfg.instance,
                "--database",
                cfg.database,
                "--topic",
                cfg.topic,
                "--subscription",
                cfg.subscription,
                "--dead-letter-topic",
                cfg.dead_letter_topic,
                "--create-instance",
                "--instance-config",
                cfg.spanner_instance_config,
            ],
            "Spanner instance (1 node, billed by the hour) and database; topics and subscriptions. Idempotent.",
        )
    ]


def iam_steps(cfg: DeployConfig) -> list[Step]:
    """Least-privilege bindings: each role on the narrowest resource that carries it."""
    p = ["--project", cfg.project]
    worker, fold = f"serviceAccount:{cfg.job_sa('streaming')}", f"serviceAccount:{cfg.job_sa('fold')}"
    publisher, scheduler = (
        f"serviceAccount:{cfg.email(cfg.publisher_sa)}",
        f"serviceAccount:{cfg.email(cfg.scheduler_sa)}",
    )
    steps = [
        # Publishers: publish to the votes topic and nothing else (no project-level Pub/Sub role).
        Step(
            [
                "gcloud",
                "pubsub",
                "topics",
                "add-iam-policy-binding",
                cfg.topic,
                f"--member={publisher}",
                "--role=roles/pubsub.publisher",
                *p,
            ],
            "publishers: publish on the votes topic only",
        ),
        # Streaming workers read the subscription: consume (subscriber) and read its settings
        # (viewer: pubsub.subscriptions.get). Both on the subscription only. No topic role is
        # needed, since the job reads an existing subscription rather than creating one.
        Step(
            [
                "gcloud",
                "pubsub",
                "subscriptions",
                "add-iam-policy-binding",
                cfg.subscription,
                f"--member={worker}",
                "--role=roles/pubsub.subscriber",
                *p,
            ],
            "streaming workers: pull and acknowledge votes, on the subscription only",
        ),
        Step(
            [
                "gcloud",
                "pubsub",
                "subscriptions",
                "add-iam-policy-binding",
                cfg.subscription,
                f"--member={worker}",
                "--role=roles/pubsub.viewer",
                *p,
            ],
            "streaming workers: read the subscription's settings (pubsub.subscriptions.get)",
        ),
        # Streaming workers publish rejected messages and unwritable rows to the dead-letter topic.
        Step(
            [
                "gcloud",
                "pubsub",
                "topics",
                "add-iam-policy-binding",
                cfg.dead_letter_topic,
                f"--member={worker}",
                "--role=roles/pubsub.publisher",
                *p,
            ],
            "streaming workers: publish dead letters, on the dead-letter topic only",
        ),
    ]
    if cfg.data_boost == "true":
        steps.append(
            Step(
                [
                    "gcloud",
                    "spanner",
                    "databases",
                    "add-iam-policy-binding",
                    cfg.database,
                    f"--instance={cfg.instance}",
                    f"--member={fold}",
                    "--role=roles/spanner.databaseReaderWithDataBoost",
                    *p,
                ],
                "fold workers: full scans on Data Boost (spanner.databases.useDataBoost), this database only",
            )
        )
    for member, kind in ((worker, "streaming"), (fold, "fold")):
        steps += [
            # Read and write rows of this one database (not instance- or project-wide).
            Step(
                [
                    "gcloud",
                    "spanner",
                    "databases",
                    "add-iam-policy-binding",
                    cfg.database,
                    f"--instance={cfg.instance}",
                    f"--member={member}",
                    "--role=roles/spanner.databaseUser",
                    *p,
                ],
                f"{kind} workers: read and write the database, this database only",
            ),
            # Dataflow worker: the job's VMs report to the service and lease work. Project-level
            # only; there is no narrower resource for it.
            Step(
                [
                    "gcloud",
                    "projects",
                    "add-iam-policy-binding",
                    cfg.project,
                    f"--member={member}",
                    "--role=roles/dataflow.worker",
                    "--condition=None",
                ],
                f"{kind} launcher and workers: run Dataflow work items (project-level by design)",
            ),
            # Staging and temp files, and the template spec the launcher reads: this bucket only.
            Step(
                [
                    "gcloud",
                    "storage",
                    "buckets",
                    "add-iam-policy-binding",
                    f"gs://{cfg.bucket_name}",
                    f"--member={member}",
                    "--role=roles/storage.objectAdmin",
                    *p,
                ],
                f"{kind} launcher and workers: staging and temp files, this bucket only",
            ),
            # Pull the image that is both launcher and SDK worker container: this repository only.
            Step(
                [
                    "gcloud",
                    "artifacts",
                    "repositories",
                    "add-iam-policy-binding",
                    cfg.repository,
                    f"--location={cfg.region}",
                    f"--member={member}",
                    "--role=roles/artifactregistry.reader",
                    *p,
                ],
                f"{kind} launcher and workers: pull the image, this repository only",
            ),
        ]
    steps += [
        # Launch flex templates (dataflow.jobs.create). Dataflow Developer is the narrowest
        # predefined role that can; it cannot read job data or act as any service account by itself.
        Step(
            [
                "gcloud",
                "projects",
                "add-iam-policy-binding",
                cfg.project,
                f"--member={scheduler}",
                "--role=roles/dataflow.developer",
                "--condition=None",
            ],
            "scheduler: launch flex templates (project-level; narrowest predefined role)",
        ),
        # Run the fold as its worker account, and only that account.
        Step(
            [
                "gcloud",
                "iam",
                "service-accounts",
                "add-iam-policy-binding",
                cfg.job_sa("fold"),
                f"--member={scheduler}",
                "--role=roles/iam.serviceAccountUser",
                *p,
            ],
            "scheduler: launch jobs as the fold's service account, and no other",
        ),
        # Read the fold's template spec from the bucket at launch.
        Step(
            [
                "gcloud",
                "storage",
                "buckets",
                "add-iam-policy-binding",
                f"gs://{cfg.bucket_name}",
                f"--member={scheduler}",
                "--role=roles/storage.objectViewer",
                *p,
            ],
            "scheduler: read the template spec, this bucket only",
        ),
    ]
    return steps


def build_steps(cfg: DeployConfig) -> list[Step]:
    substitutions = ",".join(f"_{kind.upper()}_IMAGE={cfg.image(kind)}" for kind in KINDS)
    steps = [
        Step(
            [
                "gcloud",
                "builds",
                "submit",
                ".",
                "--config=templates/cloudbuild.yaml",
                f"--substitutions={substitutions}",
                "--project",
                cfg.project,
            ],
            "build templates/Dockerfile once per template on Cloud Build and push both images",
        )
    ]
    for kind in KINDS:
        steps.append(
            Step(
                [
                    "gcloud",
                    "dataflow",
                    "flex-template",
                    "build",
                    cfg.template_path(kind),
                    f"--image={cfg.image(kind)}",
                    "--sdk-language=PYTHON",
                    f"--metadata-file=templates/{kind}/metadata.json",
                    "--project",
                    cfg.project,
                ],
                f"the {kind} template spec: its image and its parameters",
            )
        )
    return steps


def _experiments(cfg: DeployConfig) -> list[str]:
    return [e.strip() for e in cfg.experiments.split(",") if e.strip()]


def run_steps(cfg: DeployConfig) -> list[Step]:
    steps = []
    for kind in KINDS:
        job = cfg.streaming_job if kind == "streaming" else cfg.fold_job
        argv = [
            "gcloud",
            "dataflow",
            "flex-template",
            "run",
            job,
            f"--template-file-gcs-location={cfg.template_path(kind)}",
            f"--region={cfg.region}",
            "--project",
            cfg.project,
            f"--service-account-email={cfg.job_sa(kind)}",
            f"--staging-location={cfg.staging_location}",
            f"--temp-location={cfg.temp_location}",
            f"--max-workers={cfg.max_workers if kind == 'streaming' else cfg.fold_max_workers}",
        ]
        if kind == "streaming" and cfg.streaming_engine:
            argv.append("--enable-streaming-engine")
        if cfg.machine_type:
            argv.append(f"--worker-machine-type={cfg.machine_type}")
        if _experiments(cfg):
            argv.append(f"--additional-experiments={','.join(_experiments(cfg))}")
        if kind == "streaming" and cfg.update:
            argv.append("--update")
        argv += [f"--parameters={name}={value}" for name, value in template_parameters(cfg, kind).items()]
        # The workers run the same image as the launcher (Google's flex-template sample passes it so).
        argv.append(f"--parameters=sdk_container_image={cfg.image(kind)}")
        why = (
            "the streaming job (UPDATE=1 replaces the running one in place, keeping its name)"
            if kind == "streaming"
            else "one fold now, to check the template before scheduling it"
        )
        steps.append(Step(argv, why))
    return steps


def launch_request(cfg: DeployConfig) -> dict:
    """The body of projects.locations.flexTemplates.launch for one fold."""
    environment: dict[str, object] = {
        "serviceAccountEmail": cfg.job_sa("fold"),
        "tempLocation": cfg.temp_location,
        "stagingLocation": cfg.staging_location,
        "maxWorkers": cfg.fold_max_workers,
        "sdkContainerImage": cfg.image("fold"),
    }
    if cfg.machine_type:
        environment["machineType"] = cfg.machine_type
    if _experiments(cfg):
        environment["additionalExperiments"] = _experiments(cfg)
    return {
        "launchParameter": {
            # A fixed name: Dataflow refuses a launch while a job of this name is still running, so
            # a slow fold is never overlapped by the next one.
            "jobName": cfg.fold_job,
            "containerSpecGcsPath": cfg.template_path("fold"),
            "parameters": template_parameters(cfg, "fold"),
            "environment": environment,
        }
    }


def launch_uri(cfg: DeployConfig) -> str:
    return f"{DATAFLOW_API}/projects/{cfg.project}/locations/{cfg.region}/flexTemplates:launch"


def _compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def scheduler_job(cfg: DeployConfig) -> dict:
    """The Cloud Scheduler job (REST resource) that launches the fold template on schedule.
    The HTTP body is base64, as the Scheduler API requires for bytes fields."""
    body = _compact_json(launch_request(cfg)).encode("utf-8")
    return {
        "name": f"projects/{cfg.project}/locations/{cfg.region}/jobs/{cfg.fold_job}",
        "description": f"Launches the upvotes fold template ({cfg.template_path('fold')}) on schedule.",
        "schedule": cfg.fold_schedule,
        "timeZone": cfg.time_zone,
        "httpTarget": {
            "uri": launch_uri(cfg),
            "httpMethod": "POST",
            "headers": {"Content-Type": "application/json"},
            "body": base64.b64encode(body).decode("ascii"),
            # Google APIs take an OAuth access token (an OIDC token is for Cloud Run and the like).
            "oauthToken": {"serviceAccountEmail": cfg.email(cfg.scheduler_sa), "scope": CLOUD_PLATFORM_SCOPE},
        },
    }


def scheduler_steps(cfg: DeployConfig) -> list[Step]:
    job = scheduler_job(cfg)
    verb = "update" if cfg.update else "create"
    return [
        Step(
            [
                "gcloud",
                "scheduler",
                "jobs",
                verb,
                "http",
                cfg.fold_job,
                f"--location={cfg.region}",
                "--project",
                cfg.project,
                f"--schedule={job['schedule']}",
                f"--time-zone={job['timeZone']}",
                f"--uri={job['httpTarget']['uri']}",
                "--http-method=POST",
                "--update-headers=Content-Type=application/json"
                if cfg.update
                else "--headers=Content-Type=application/json",
                f"--message-body={_compact_json(launch_request(cfg))}",
                f"--oauth-service-account-email={cfg.email(cfg.scheduler_sa)}",
                f"--oauth-token-scope={CLOUD_PLATFORM_SCOPE}",
                f"--description={job['description']}",
            ],
            f"launch the fold every time {cfg.fold_schedule!r} fires ({cfg.time_zone})",
        )
    ]


STEPS: dict[str, Callable[[DeployConfig], list[Step]]] = {
    "setup": setup_steps,
    "provision": provision_steps,
    "iam": iam_steps,
    "build": build_steps,
    "run": run_steps,
    "schedule": scheduler_steps,
}


def steps_for(action: str, cfg: DeployConfig) -> list[Step]:
    if action == "all":
        return [step for name in STEPS for step in STEPS[name](cfg)]
    return STEPS[action](cfg)


# --- running -------------------------------------------------------------------------------


def print_steps(steps: Sequence[Step], out: TextIO) -> None:
    """The exact commands, one per line, each after a comment saying why."""
    for step in steps:
        if step.why:
            print(f"# {step.why}", file=out)
        print(shlex.join(step.argv), file=out)


def execute_steps(
    steps: Sequence[Step],
    out: TextIO,
    err: TextIO,
    cwd: Path = REPO_ROOT,
    run: Callable[[list[str]], int] | None = None,
) -> int:
    """Runs the steps in order, from the repository root (Cloud Build uploads it and the paths
    are relative to it); stops at the first that fails and says which."""
    run = run or (lambda argv: subprocess.run(argv, cwd=cwd, check=False).returncode)
    for number, step in enumerate(steps, 1):
        argv = [sys.executable, "-m", "upvotes.cli", *step.argv[1:]] if step.argv[0] == "upvotes" else step.argv
        print(f"[{number}/{len(steps)}] {shlex.join(step.argv)}", file=out, flush=True)
        try:
            code = run(argv)
        except FileNotFoundError:
            print(
                f"upvotes deploy: {step.argv[0]} is not installed or not on PATH; install the Google "
                "Cloud CLI (https://cloud.google.com/sdk/docs/install) and run `gcloud auth login`.",
                file=err,
            )
            return 127
        if code != 0:
            print(
                f"upvotes deploy: step {number} of {len(steps)} failed with exit code {code}:\n  "
                f"{shlex.join(step.argv)}\nNothing after it ran. A create step fails when the resource "
                "already exists: run the later actions on their own (see templates/README.md).",
                file=err,
            )
            return code
    return 0
