"""`upvotes deploy`: the whole Google Cloud deployment as plain, printable gcloud commands.

Nothing in this module talks to Google Cloud. Every function returns data — the flex-template
metadata (a dict), the gcloud command lines (argv lists), the Cloud Scheduler job (a dict) —
so tests check all of it offline, `upvotes deploy ACTION --dry-run` prints the exact commands,
and without --dry-run the same commands run one after the other, stopping at the first failure.

    upvotes deploy metadata [--check | --markdown]   templates/<kind>/metadata.json + README table
    upvotes deploy setup       enable APIs; service accounts, bucket, Artifact Registry repository
    upvotes deploy provision   Spanner instance and database, topics and subscriptions
    upvotes deploy iam         least-privilege role bindings for every identity
    upvotes deploy build       one image (launcher + SDK worker) per template, both template specs
    upvotes deploy run         launch the streaming job and one fold
    upvotes deploy schedule    Cloud Scheduler job launching the fold template every N minutes
    upvotes deploy all         all of the above, in that order (after metadata)

The settings come from environment variables (DeployConfig.from_env; `upvotes deploy --help`
lists them). The template parameters come from the one table in pipeline/options.py: the
metadata, the --parameters of a launch, the scheduler's launch body and the flag/parameter table
in templates/README.md are all generated from it, so they cannot drift apart.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TextIO

from pipeline.params import FOLD_PARAMS, PROJECT_ID, STREAMING_PARAMS, InvalidParameter, Param

REPO_ROOT = Path(__file__).resolve().parent.parent
KINDS = ("streaming", "fold")
PARAMS: dict[str, tuple[Param, ...]] = {"streaming": STREAMING_PARAMS, "fold": FOLD_PARAMS}
ACTIONS = ("metadata", "setup", "provision", "iam", "build", "run", "schedule", "all")

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
DATAFLOW_API = "https://dataflow.googleapis.com/v1b3"
LAUNCHER_DIR = "/template"  # WORKDIR of templates/Dockerfile

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

TEMPLATE_INFO: dict[str, dict[str, object]] = {
    "streaming": {
        "name": "Upvotes: Pub/Sub votes to Spanner delta rows",
        "description": (
            "Streaming pipeline. Reads vote events from a Pub/Sub subscription, validates them, sums "
            "them per post over short windows and blind-writes one delta row per post and window to "
            "Cloud Spanner. Rejected messages and rows that cannot be written go to a dead-letter topic."
        ),
        # Exactly-once only: a replayed pane must keep its delta key, which at-least-once mode
        # does not promise.
        "streaming": True,
        "supportsAtLeastOnce": False,
        "supportsExactlyOnce": True,
    },
    "fold": {
        "name": "Upvotes: fold delta rows into Posts",
        "description": (
            "Batch pipeline. Folds every unfolded delta row into the Posts aggregate exactly once, one "
            "read-write transaction per group of posts. Launched every few minutes by Cloud Scheduler."
        ),
        "streaming": False,
    },
}


# --- flex-template metadata, generated from pipeline/options.py ----------------------------

def _help_text(param: Param) -> str:
    text = param.help.rstrip()
    if not param.required:
        text += f" Default: {param.default}."
    return f"{text} Example: {param.example}"


def template_metadata(kind: str) -> dict:
    """The flex-template metadata of `kind` ("streaming" or "fold"), from its Param table."""
    if kind not in PARAMS:
        raise ValueError(f"unknown template {kind!r}: expected one of {', '.join(KINDS)}")
    metadata = dict(TEMPLATE_INFO[kind])
    metadata["parameters"] = [
        {
            "name": param.template_name,
            "label": param.label,
            "helpText": _help_text(param),
            "isOptional": not param.required,
            "regexes": [f"^{param.regex}$"],
        }
        for param in PARAMS[kind]
    ]
    return metadata


def metadata_text(kind: str) -> str:
    """metadata.json as committed: two-space indent, stable key order, final newline."""
    return json.dumps(template_metadata(kind), indent=2, ensure_ascii=False) + "\n"


def metadata_path(kind: str, root: Path = REPO_ROOT) -> Path:
    return root / "templates" / kind / "metadata.json"


# --- the flag / parameter table of templates/README.md -------------------------------------

TABLE_START = "<!-- parameter-table:start (generated by `upvotes deploy metadata`; do not edit) -->"
TABLE_END = "<!-- parameter-table:end -->"


def all_params() -> list[Param]:
    """Every Param of both pipelines, once each, in table order."""
    seen: dict[str, Param] = {}
    for kind in KINDS:
        for param in PARAMS[kind]:
            seen.setdefault(param.flag, param)
    return list(seen.values())


def parameter_table_markdown() -> str:
    """The Markdown table mapping each CLI flag to its template parameter and deploy variable."""
    env_of = {f.metadata["param"]: f.metadata["env"] for f in dataclasses.fields(DeployConfig) if "param" in f.metadata}
    rows = [
        "| CLI flag | Template parameter | Pipelines | Default | Example | `upvotes deploy` variable |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for param in all_params():
        kinds = ", ".join(kind for kind in KINDS if param in PARAMS[kind])
        default = "required" if param.required else f"`{param.default}`"
        rows.append(
            f"| `--{param.flag}` | `{param.template_name}` | {kinds} | {default} | `{param.example}` "
            f"| `{env_of.get(param.flag, '')}` |"
        )
    return "\n".join(rows) + "\n"


def readme_with_table(readme: str) -> str:
    """`readme` with the text between the table markers replaced by the generated table."""
    start, end = readme.find(TABLE_START), readme.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no {TABLE_START!r} ... {TABLE_END!r} markers")
    return readme[: start + len(TABLE_START)] + "\n" + parameter_table_markdown() + readme[end:]


def readme_paths(root: Path = REPO_ROOT) -> list[Path]:
    """The READMEs that carry the parameter table: the project's and the deploy guide."""
    return [root / "README.md", root / "templates" / "README.md"]


def generated_files(root: Path = REPO_ROOT) -> dict[Path, str]:
    """Every file `upvotes deploy metadata` writes, with the content it should have."""
    files = {metadata_path(kind, root): metadata_text(kind) for kind in KINDS}
    for readme in readme_paths(root):
        if readme.exists():
            files[readme] = readme_with_table(readme.read_text(encoding="utf-8"))
    return files


def stale_files(root: Path = REPO_ROOT) -> list[Path]:
    """The generated files whose content on disk differs from what would be generated."""
    return [path for path, text in generated_files(root).items()
            if not path.exists() or path.read_text(encoding="utf-8") != text]


def write_metadata(root: Path = REPO_ROOT) -> list[Path]:
    """Writes the stale generated files; returns them."""
    written = []
    for path, text in generated_files(root).items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


# --- configuration ---------------------------------------------------------------------------

def _param(flag: str) -> Param:
    return next(p for p in all_params() if p.flag == flag)


def _setting(env: str, text: str, param: str | None = None) -> dict[str, str]:
    return {"env": env, "help": text, **({"param": param} if param else {})}


@dataclass(frozen=True)
class DeployConfig:
    """Where and how to deploy. Every field has an environment variable (`from_env`).

    Service accounts are account IDs in `project` (`upvotes-streaming`) or full emails.
    Template parameters that are optional in the pipeline may be None: the launch then
    leaves them out and the pipeline's default applies.
    """

    project: str = field(default="", metadata=_setting("PROJECT", "Google Cloud project ID (required)"))
    region: str = field(default="us-central1", metadata=_setting(
        "REGION", "region of the Dataflow jobs, bucket, image repository and scheduler job"))
    bucket: str = field(default="", metadata=_setting(
        "BUCKET", "bucket for template specs, staging and temp files (default: <PROJECT>-upvotes)"))
    repository: str = field(default="upvotes", metadata=_setting("REPOSITORY", "Artifact Registry Docker repository"))
    image_tag: str = field(default="latest", metadata=_setting(
        "IMAGE_TAG", "tag of the images; use an immutable one, such as the git commit"))
    instance: str = field(default="upvotes", metadata=_setting("INSTANCE", "Spanner instance ID", "instance"))
    instance_config: str = field(default="", metadata=_setting(
        "INSTANCE_CONFIG", "Spanner instance configuration (default: regional-<REGION>)"))
    database: str = field(default="votes", metadata=_setting("DATABASE", "Spanner database ID", "database"))
    topic: str = field(default="votes", metadata=_setting("TOPIC", "topic the publishers send votes to"))
    subscription: str = field(default="votes-sub", metadata=_setting(
        "SUBSCRIPTION", "subscription the streaming job reads", "subscription"))
    dead_letter_topic: str = field(default="votes-dead-letter", metadata=_setting(
        "DEAD_LETTER_TOPIC", "dead-letter topic; its subscription is <DEAD_LETTER_TOPIC>-kept", "dead-letter-topic"))
    window_seconds: str | None = field(default=_param("window-seconds").default, metadata=_setting(
        "WINDOW_SECONDS", "seconds per window: lower is fresher, higher writes fewer rows", "window-seconds"))
    rows_per_commit: str | None = field(default=_param("rows-per-commit").default, metadata=_setting(
        "ROWS_PER_COMMIT", "delta rows per Spanner commit", "rows-per-commit"))
    max_clock_skew_seconds: str | None = field(default=_param("max-clock-skew-seconds").default, metadata=_setting(
        "MAX_CLOCK_SKEW_SECONDS", "event times further ahead than this count in their ingestion hour",
        "max-clock-skew-seconds"))
    posts_per_commit: str | None = field(default=_param("posts-per-commit").default, metadata=_setting(
        "POSTS_PER_COMMIT", "posts per fold transaction", "posts-per-commit"))
    streaming_job: str = field(default="upvotes-streaming", metadata=_setting("STREAMING_JOB", "streaming job name"))
    fold_job: str = field(default="upvotes-fold", metadata=_setting(
        "FOLD_JOB", "fold job name and scheduler job ID; a launch is refused while a fold of this name runs"))
    fold_schedule: str = field(default="*/10 * * * *", metadata=_setting(
        "FOLD_SCHEDULE", "cron schedule of the fold (unix-cron, in TIME_ZONE)"))
    time_zone: str = field(default="Etc/UTC", metadata=_setting("TIME_ZONE", "time zone of FOLD_SCHEDULE"))
    max_workers: int = field(default=3, metadata=_setting("MAX_WORKERS", "most workers of the streaming job"))
    fold_max_workers: int = field(default=2, metadata=_setting("FOLD_MAX_WORKERS", "most workers of one fold"))
    machine_type: str = field(default="", metadata=_setting(
        "MACHINE_TYPE", "worker machine type of both jobs (default: Dataflow's)"))
    streaming_engine: bool = field(default=True, metadata=_setting(
        "STREAMING_ENGINE", "1: run the streaming job on Streaming Engine; 0: leave the flag off"))
    experiments: str = field(default="", metadata=_setting(
        "EXPERIMENTS", "comma-separated Dataflow experiments for both jobs"))
    update: bool = field(default=False, metadata=_setting(
        "UPDATE", "1: `run` updates the running streaming job in place, `schedule` updates the scheduler job"))
    worker_sa: str = field(default="upvotes-streaming", metadata=_setting(
        "WORKER_SA", "service account of the streaming job's launcher and workers"))
    fold_sa: str = field(default="upvotes-fold", metadata=_setting(
        "FOLD_WORKER_SA", "service account of the fold's launcher and workers"))
    publisher_sa: str = field(default="upvotes-publisher", metadata=_setting(
        "PUBLISHER_SA", "service account of the vote publishers"))
    scheduler_sa: str = field(default="upvotes-scheduler", metadata=_setting(
        "SCHEDULER_SA", "service account whose OAuth token Cloud Scheduler sends to the Dataflow API"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "DeployConfig":
        """Reads every field from its environment variable; unset variables keep the defaults.
        An optional template parameter set to the empty string is left out of launches."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is None:
                continue
            if isinstance(f.default, bool):
                values[f.name] = _truthy(f.metadata["env"], raw)
            elif isinstance(f.default, int):
                values[f.name] = _positive_int(f.metadata["env"], raw)
            elif "param" in f.metadata:
                values[f.name] = raw.strip() or None
            else:
                values[f.name] = raw.strip()
        return cls(**values)

    # Derived names.
    @property
    def bucket_name(self) -> str:
        return self.bucket or f"{self.project}-upvotes"

    @property
    def spanner_instance_config(self) -> str:
        return self.instance_config or f"regional-{self.region}"

    @property
    def dead_letter_subscription(self) -> str:
        return f"{self.dead_letter_topic}-kept"  # as upvotes.provision.Resources names it

    def email(self, account: str) -> str:
        return account if "@" in account else f"{account}@{self.project}.iam.gserviceaccount.com"

    def image(self, kind: str) -> str:
        """The image of one template: launcher and SDK worker at once (templates/Dockerfile)."""
        return f"{self.region}-docker.pkg.dev/{self.project}/{self.repository}/upvotes-{kind}:{self.image_tag}"

    def template_path(self, kind: str) -> str:
        return f"gs://{self.bucket_name}/templates/{kind}.json"

    @property
    def temp_location(self) -> str:
        return f"gs://{self.bucket_name}/tmp"

    @property
    def staging_location(self) -> str:
        return f"gs://{self.bucket_name}/staging"

    def job_sa(self, kind: str) -> str:
        return self.email(self.worker_sa if kind == "streaming" else self.fold_sa)

    def param_values(self) -> dict[str, str | None]:
        """Template parameter values by Param.flag; Pub/Sub names as full resource paths."""
        return {
            "subscription": f"projects/{self.project}/subscriptions/{self.subscription}",
            "dead-letter-topic": f"projects/{self.project}/topics/{self.dead_letter_topic}",
            "instance": self.instance,
            "database": self.database,
            "window-seconds": self.window_seconds,
            "rows-per-commit": self.rows_per_commit,
            "max-clock-skew-seconds": self.max_clock_skew_seconds,
            "posts-per-commit": self.posts_per_commit,
        }

    def validate(self) -> "DeployConfig":
        """Refuses settings the commands would fail on, naming the variable to fix."""
        env = {f.name: f.metadata["env"] for f in dataclasses.fields(self)}
        if not self.project:
            raise InvalidParameter("PROJECT is required: export PROJECT=<your Google Cloud project ID>")
        if not re.fullmatch(PROJECT_ID, self.project):
            raise InvalidParameter(f"PROJECT={self.project!r} is not a Google Cloud project ID")
        if not re.fullmatch(r"[a-z]+-[a-z]+[0-9]+", self.region):
            raise InvalidParameter(f"REGION={self.region!r} is not a region such as us-central1")
        if not re.fullmatch(r"[a-z0-9][-a-z0-9_.]{1,61}[a-z0-9]", self.bucket_name):
            raise InvalidParameter(f"BUCKET={self.bucket_name!r} is not a Cloud Storage bucket name")
        if len(self.fold_schedule.split()) != 5:
            raise InvalidParameter(f"FOLD_SCHEDULE={self.fold_schedule!r} is not a five-field cron schedule")
        for name in ("repository", "image_tag", "streaming_job", "fold_job", "topic"):
            if not re.fullmatch(r"[a-z0-9][-a-z0-9_.]*", getattr(self, name)):
                raise InvalidParameter(f"{env[name]}={getattr(self, name)!r} must be lowercase letters, digits, -, _ or .")
        values = self.param_values()
        by_flag = {f.metadata["param"]: f.metadata["env"] for f in dataclasses.fields(self) if "param" in f.metadata}
        for param in all_params():
            value = values[param.flag]
            if value is None and param.required:
                raise InvalidParameter(f"{by_flag[param.flag]} is required (template parameter {param.template_name})")
            if value is not None and not re.fullmatch(param.regex, value):
                raise InvalidParameter(
                    f"{by_flag[param.flag]}={value!r} is not valid for template parameter "
                    f"{param.template_name}: {param.help} Example: {param.example}"
                )
        return self


def _truthy(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise InvalidParameter(f"{name}={raw!r}: expected 1 or 0")


def _positive_int(name: str, raw: str) -> int:
    if not re.fullmatch(r"[1-9][0-9]*", raw.strip()):
        raise InvalidParameter(f"{name}={raw!r}: expected a positive whole number")
    return int(raw)


def environment_help() -> str:
    """The environment variables of DeployConfig, for `upvotes deploy --help`."""
    lines = ["environment variables (defaults in brackets):"]
    for f in dataclasses.fields(DeployConfig):
        default = f.default if f.default not in ("", None) else "-"
        if isinstance(f.default, bool):
            default = int(f.default)
        lines.append(f"  {f.metadata['env']:<18} {f.metadata['help']} [{default}]")
    return "\n".join(lines)


# --- commands ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One command, with the reason it exists (printed as a comment by --dry-run)."""

    argv: list[str]
    why: str = ""


def _commands(steps: Iterable[Step]) -> list[list[str]]:
    return [step.argv for step in steps]


def template_parameters(cfg: DeployConfig, kind: str) -> dict[str, str]:
    """The launch parameters of `kind` by template name: every required one, and each optional
    one that is set (None leaves the pipeline's default)."""
    values = cfg.param_values()
    return {p.template_name: values[p.flag] for p in PARAMS[kind] if values[p.flag] is not None}


def setup_steps(cfg: DeployConfig) -> list[Step]:
    p = ["--project", cfg.project]
    steps = [Step(["gcloud", "services", "enable", *APIS, *p], "APIs of every service used below")]
    for account, what in ((cfg.worker_sa, "streaming job"), (cfg.fold_sa, "fold job"),
                          (cfg.publisher_sa, "vote publishers"), (cfg.scheduler_sa, "Cloud Scheduler")):
        if cfg.email(account).endswith(f"@{cfg.project}.iam.gserviceaccount.com"):  # not another project's
            steps.append(Step(
                ["gcloud", "iam", "service-accounts", "create", account.split("@")[0],
                 f"--display-name=upvotes: {what}", *p],
                f"one identity per role, so each gets only what it needs ({what})",
            ))
    steps.append(Step(
        ["gcloud", "storage", "buckets", "create", f"gs://{cfg.bucket_name}", f"--location={cfg.region}",
         "--uniform-bucket-level-access", *p],
        "template specs, staging and temp files, in the jobs' region",
    ))
    steps.append(Step(
        ["gcloud", "artifacts", "repositories", "create", cfg.repository, "--repository-format=docker",
         f"--location={cfg.region}", *p],
        "the images: launcher and SDK worker in one",
    ))
    return steps


def setup_commands(cfg: DeployConfig) -> list[list[str]]:
    return _commands(setup_steps(cfg))


def provision_steps(cfg: DeployConfig) -> list[Step]:
    return [Step(
        ["upvotes", "provision", "--project", cfg.project, "--instance", cfg.instance, "--database", cfg.database,
         "--topic", cfg.topic, "--subscription", cfg.subscription, "--dead-letter-topic", cfg.dead_letter_topic,
         "--create-instance", "--instance-config", cfg.spanner_instance_config],
        "Spanner instance (1 node, billed by the hour) and database; topics and subscriptions. Idempotent.",
    )]


def provision_commands(cfg: DeployConfig) -> list[list[str]]:
    return _commands(provision_steps(cfg))


def iam_steps(cfg: DeployConfig) -> list[Step]:
    """Least-privilege bindings: each role on the narrowest resource that carries it."""
    p = ["--project", cfg.project]
    worker, fold = f"serviceAccount:{cfg.job_sa('streaming')}", f"serviceAccount:{cfg.job_sa('fold')}"
    publisher, scheduler = f"serviceAccount:{cfg.email(cfg.publisher_sa)}", f"serviceAccount:{cfg.email(cfg.scheduler_sa)}"
    steps = [
        # Publishers: publish to the votes topic and nothing else (no project-level Pub/Sub role).
        Step(["gcloud", "pubsub", "topics", "add-iam-policy-binding", cfg.topic,
              f"--member={publisher}", "--role=roles/pubsub.publisher", *p],
             "publishers: publish on the votes topic only"),
        # Streaming workers read the subscription: consume (subscriber) and read its settings
        # (viewer: pubsub.subscriptions.get). Both on the subscription only. No topic role is
        # needed, since the job reads an existing subscription rather than creating one.
        Step(["gcloud", "pubsub", "subscriptions", "add-iam-policy-binding", cfg.subscription,
              f"--member={worker}", "--role=roles/pubsub.subscriber", *p],
             "streaming workers: pull and acknowledge votes, on the subscription only"),
        Step(["gcloud", "pubsub", "subscriptions", "add-iam-policy-binding", cfg.subscription,
              f"--member={worker}", "--role=roles/pubsub.viewer", *p],
             "streaming workers: read the subscription's settings (pubsub.subscriptions.get)"),
        # Streaming workers publish rejected messages and unwritable rows to the dead-letter topic.
        Step(["gcloud", "pubsub", "topics", "add-iam-policy-binding", cfg.dead_letter_topic,
              f"--member={worker}", "--role=roles/pubsub.publisher", *p],
             "streaming workers: publish dead letters, on the dead-letter topic only"),
    ]
    for member, kind in ((worker, "streaming"), (fold, "fold")):
        steps += [
            # Read and write rows of this one database (not instance- or project-wide).
            Step(["gcloud", "spanner", "databases", "add-iam-policy-binding", cfg.database,
                  f"--instance={cfg.instance}", f"--member={member}", "--role=roles/spanner.databaseUser", *p],
                 f"{kind} workers: read and write the database, this database only"),
            # Dataflow worker: the job's VMs report to the service and lease work. Project-level
            # only; there is no narrower resource for it.
            Step(["gcloud", "projects", "add-iam-policy-binding", cfg.project,
                  f"--member={member}", "--role=roles/dataflow.worker", "--condition=None"],
                 f"{kind} launcher and workers: run Dataflow work items (project-level by design)"),
            # Staging and temp files, and the template spec the launcher reads: this bucket only.
            Step(["gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{cfg.bucket_name}",
                  f"--member={member}", "--role=roles/storage.objectAdmin", *p],
                 f"{kind} launcher and workers: staging and temp files, this bucket only"),
            # Pull the image that is both launcher and SDK worker container: this repository only.
            Step(["gcloud", "artifacts", "repositories", "add-iam-policy-binding", cfg.repository,
                  f"--location={cfg.region}", f"--member={member}", "--role=roles/artifactregistry.reader", *p],
                 f"{kind} launcher and workers: pull the image, this repository only"),
        ]
    steps += [
        # Launch flex templates (dataflow.jobs.create). Dataflow Developer is the narrowest
        # predefined role that can; it cannot read job data or act as any service account by itself.
        Step(["gcloud", "projects", "add-iam-policy-binding", cfg.project,
              f"--member={scheduler}", "--role=roles/dataflow.developer", "--condition=None"],
             "scheduler: launch flex templates (project-level; narrowest predefined role)"),
        # Run the fold as its worker account, and only that account.
        Step(["gcloud", "iam", "service-accounts", "add-iam-policy-binding", cfg.job_sa("fold"),
              f"--member={scheduler}", "--role=roles/iam.serviceAccountUser", *p],
             "scheduler: launch jobs as the fold's service account, and no other"),
        # Read the fold's template spec from the bucket at launch.
        Step(["gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{cfg.bucket_name}",
              f"--member={scheduler}", "--role=roles/storage.objectViewer", *p],
             "scheduler: read the template spec, this bucket only"),
    ]
    return steps


def iam_commands(cfg: DeployConfig) -> list[list[str]]:
    return _commands(iam_steps(cfg))


def build_steps(cfg: DeployConfig) -> list[Step]:
    substitutions = ",".join(f"_{kind.upper()}_IMAGE={cfg.image(kind)}" for kind in KINDS)
    steps = [Step(
        ["gcloud", "builds", "submit", ".", "--config=templates/cloudbuild.yaml",
         f"--substitutions={substitutions}", "--project", cfg.project],
        "build templates/Dockerfile once per template on Cloud Build and push both images",
    )]
    for kind in KINDS:
        steps.append(Step(
            ["gcloud", "dataflow", "flex-template", "build", cfg.template_path(kind),
             f"--image={cfg.image(kind)}", "--sdk-language=PYTHON",
             f"--metadata-file=templates/{kind}/metadata.json", "--project", cfg.project],
            f"the {kind} template spec: its image and its parameters",
        ))
    return steps


def build_commands(cfg: DeployConfig) -> list[list[str]]:
    return _commands(build_steps(cfg))


def _experiments(cfg: DeployConfig) -> list[str]:
    return [e.strip() for e in cfg.experiments.split(",") if e.strip()]


def run_steps(cfg: DeployConfig) -> list[Step]:
    steps = []
    for kind in KINDS:
        job = cfg.streaming_job if kind == "streaming" else cfg.fold_job
        argv = [
            "gcloud", "dataflow", "flex-template", "run", job,
            f"--template-file-gcs-location={cfg.template_path(kind)}",
            f"--region={cfg.region}", "--project", cfg.project,
            f"--service-account-email={cfg.job_sa(kind)}",
            f"--staging-location={cfg.staging_location}", f"--temp-location={cfg.temp_location}",
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
        why = ("the streaming job (UPDATE=1 replaces the running one in place, keeping its name)"
               if kind == "streaming" else "one fold now, to check the template before scheduling it")
        steps.append(Step(argv, why))
    return steps


def run_commands(cfg: DeployConfig) -> list[list[str]]:
    return _commands(run_steps(cfg))


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
    return {"launchParameter": {
        # A fixed name: Dataflow refuses a launch while a job of this name is still running, so
        # a slow fold is never overlapped by the next one.
        "jobName": cfg.fold_job,
        "containerSpecGcsPath": cfg.template_path("fold"),
        "parameters": template_parameters(cfg, "fold"),
        "environment": environment,
    }}


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
    return [Step(
        ["gcloud", "scheduler", "jobs", verb, "http", cfg.fold_job, f"--location={cfg.region}",
         "--project", cfg.project, f"--schedule={job['schedule']}", f"--time-zone={job['timeZone']}",
         f"--uri={job['httpTarget']['uri']}", "--http-method=POST",
         "--update-headers=Content-Type=application/json" if cfg.update else "--headers=Content-Type=application/json",
         f"--message-body={_compact_json(launch_request(cfg))}",
         f"--oauth-service-account-email={cfg.email(cfg.scheduler_sa)}",
         f"--oauth-token-scope={CLOUD_PLATFORM_SCOPE}",
         f"--description={job['description']}"],
        f"launch the fold every time {cfg.fold_schedule!r} fires ({cfg.time_zone})",
    )]


def scheduler_commands(cfg: DeployConfig) -> list[list[str]]:
    return _commands(scheduler_steps(cfg))


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


def execute_steps(steps: Sequence[Step], out: TextIO, err: TextIO, cwd: Path = REPO_ROOT,
                  run: Callable[[list[str]], int] | None = None) -> int:
    """Runs the steps in order, from the repository root (Cloud Build uploads it and the paths
    are relative to it); stops at the first that fails and says which."""
    run = run or (lambda argv: subprocess.run(argv, cwd=cwd, check=False).returncode)
    for number, step in enumerate(steps, 1):
        argv = [sys.executable, "-m", "upvotes.cli", *step.argv[1:]] if step.argv[0] == "upvotes" else step.argv
        print(f"[{number}/{len(steps)}] {shlex.join(step.argv)}", file=out, flush=True)
        try:
            code = run(argv)
        except FileNotFoundError:
            print(f"upvotes deploy: {step.argv[0]} is not installed or not on PATH; install the Google "
                  "Cloud CLI (https://cloud.google.com/sdk/docs/install) and run `gcloud auth login`.", file=err)
            return 127
        if code != 0:
            print(f"upvotes deploy: step {number} of {len(steps)} failed with exit code {code}:\n  "
                  f"{shlex.join(step.argv)}\nNothing after it ran. A create step fails when the resource "
                  "already exists: run the later actions on their own (see templates/README.md).", file=err)
            return code
    return 0
