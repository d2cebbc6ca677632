"""Offline checks of the Google Cloud deployment: flex-template metadata, Dockerfile, Cloud Build
config, the gcloud commands of `upvotes deploy`, the Cloud Scheduler job, IAM and the guide.

Nothing here reaches Google Cloud: every check is on generated data or files in the tree.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import importlib.util
import io
import json
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.options import FoldOptions, StreamingOptions
from pipeline.params import FOLD_PARAMS, STREAMING_PARAMS, InvalidParameter, Param, parse_values
from upvotes.commands import deploy as deploy_command
from upvotes.deploy import gcloud_steps, template_metadata
from upvotes.deploy.deploy_config import DeployConfig, all_params

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
DOCKERFILE = TEMPLATES / "Dockerfile"
README = TEMPLATES / "README.md"
OPTIONS = {"streaming": StreamingOptions, "fold": FoldOptions}
PARAMS = {"streaming": STREAMING_PARAMS, "fold": FOLD_PARAMS}
PROJECT = "my-project"
KINDS = ("streaming", "fold")

# Dataflow's own options: set by the launch, never template parameters.
STANDARD_OPTIONS = {
    "project",
    "region",
    "streaming",
    "runner",
    "temp_location",
    "tempLocation",
    "staging_location",
    "stagingLocation",
    "job_name",
    "jobName",
    "service_account_email",
    "serviceAccountEmail",
    "max_num_workers",
    "maxNumWorkers",
    "sdk_container_image",
    "setup_file",
}


def param_by_name(kind: str) -> dict[str, Param]:
    return {p.template_name: p for p in PARAMS[kind]}


def metadata_params(kind: str) -> list[dict]:
    return template_metadata.template_metadata(kind)["parameters"]


def cfg(**changes: Any) -> DeployConfig:
    return DeployConfig(project=PROJECT, **changes).validate()


def matches(anchored: str, value: str) -> bool:
    return re.fullmatch(anchored, value) is not None


def argv_of(steps_of: Callable) -> Callable:
    """A step list's commands alone, as `deploy --dry-run` prints them."""
    return lambda config: [step.argv for step in steps_of(config)]


# --- metadata and the pipelines' option parsers -----------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_metadata_parameter_is_accepted_by_the_pipeline_parser(kind: str) -> None:
    params = param_by_name(kind)
    argv = [f"--project={PROJECT}"] + [f"--{m['name']}={params[m['name']].example}" for m in metadata_params(kind)]
    options = PipelineOptions(argv)
    options.view_as(OPTIONS[kind]).validated()
    values = options.get_all_options()
    parse_values(PARAMS[kind], values)
    for param in PARAMS[kind]:
        assert str(values[param.dest]) == param.example, param.template_name


@pytest.mark.parametrize("kind", KINDS)
def test_the_metadata_marks_exactly_the_options_the_pipeline_requires(kind: str) -> None:
    params = param_by_name(kind)
    required = [m["name"] for m in metadata_params(kind) if not m["isOptional"]]
    assert set(required) == {p.template_name for p in PARAMS[kind] if p.required}
    assert set(params) == {m["name"] for m in metadata_params(kind)}
    base = [f"--project={PROJECT}"] + [f"--{name}={params[name].example}" for name in required]
    PipelineOptions(base).view_as(OPTIONS[kind]).validated()  # the required ones suffice
    for name in required:
        without = [arg for arg in base if not arg.startswith(f"--{name}=")]
        with pytest.raises(InvalidParameter, match=name):
            PipelineOptions(without).view_as(OPTIONS[kind]).validated()


@pytest.mark.parametrize("kind", KINDS)
def test_metadata_has_the_flex_template_fields(kind: str) -> None:
    metadata = template_metadata.template_metadata(kind)
    assert metadata["name"] and metadata["description"]
    assert metadata["streaming"] is (kind == "streaming")
    for parameter in metadata["parameters"]:
        assert set(parameter) == {"name", "label", "helpText", "isOptional", "regexes"}
        assert re.fullmatch(r"[a-z][a-zA-Z0-9]*", parameter["name"]), "Dataflow parameter names are camelCase"
        assert parameter["label"] and parameter["helpText"]
        assert all(r.startswith("^") and r.endswith("$") for r in parameter["regexes"])


@pytest.mark.parametrize("kind", KINDS)
def test_metadata_files_on_disk_are_the_generated_ones(kind: str) -> None:
    on_disk = template_metadata.metadata_path(kind).read_text(encoding="utf-8")
    assert on_disk == template_metadata.metadata_text(kind), "run `upvotes deploy metadata`"
    assert json.loads(on_disk) == template_metadata.template_metadata(kind)


def test_no_generated_file_is_stale() -> None:
    assert template_metadata.stale_files() == []


def test_unknown_template_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="streaming, fold"):
        template_metadata.template_metadata("batch")


@pytest.mark.parametrize("kind", KINDS)
def test_no_standard_option_is_a_template_parameter(kind: str) -> None:
    names = {m["name"] for m in metadata_params(kind)}
    assert not names & STANDARD_OPTIONS
    assert not {p.flag for p in PARAMS[kind]} & STANDARD_OPTIONS
    assert not {p.dest for p in PARAMS[kind]} & STANDARD_OPTIONS


# --- regexes -------------------------------------------------------------------------------


def anchored_regex(name: str) -> str:
    for kind in KINDS:
        for parameter in metadata_params(kind):
            if parameter["name"] == name:
                (regex,) = parameter["regexes"]
                return regex
    raise KeyError(name)


@pytest.mark.parametrize("param", all_params(), ids=lambda p: p.template_name)
def test_regexes_accept_each_example_and_default(param: Param) -> None:
    regex = anchored_regex(param.template_name)
    assert matches(regex, param.example)
    if param.default is not None:
        assert matches(regex, param.default)


def guide_parameters() -> list[tuple[str, str]]:
    found = re.findall(r"--parameters=(\w+)=([^\s\\`]+)", README.read_text(encoding="utf-8"))
    return [(name, value) for name, value in found if name != "sdk_container_image"]


def test_the_guide_launches_with_every_template_parameter() -> None:
    named = {name for name, _ in guide_parameters()}
    assert named == {p.template_name for p in all_params()}


@pytest.mark.parametrize("name, value", guide_parameters())
def test_regexes_accept_the_values_in_the_guide(name: str, value: str) -> None:
    assert matches(anchored_regex(name), value)


@pytest.mark.parametrize("value", ["votes-sub", "projects/my-project/subscriptions/votes-sub", "a.b_c~d+e%f"])
def test_subscription_regex_accepts_bare_names_and_full_paths(value: str) -> None:
    assert matches(anchored_regex("inputSubscription"), value)


SQL = "votes'; DROP TABLE Posts; --"
BAD_VALUES = [
    ("inputSubscription", ""),
    ("inputSubscription", "votes sub"),
    ("inputSubscription", "projects/my-project/subscriptions/"),
    ("inputSubscription", "projects/x/subscriptions/votes-sub"),
    ("inputSubscription", "projects/my-project/topics/votes"),
    ("inputSubscription", SQL),
    ("inputSubscription", "votes-sub\n"),
    ("outputDeadletterTopic", ""),
    ("outputDeadletterTopic", "projects/my-project/topics/"),
    ("outputDeadletterTopic", "projects/my-project/subscriptions/votes-dead-letter"),
    ("spannerInstanceId", ""),
    ("spannerInstanceId", "Upvotes"),
    ("spannerInstanceId", "UPVOTES"),
    ("spannerInstanceId", "up votes"),
    ("spannerInstanceId", "upvotes-"),
    ("spannerInstanceId", SQL),
    ("spannerDatabaseId", ""),
    ("spannerDatabaseId", "Votes"),
    ("spannerDatabaseId", "votes; DROP TABLE Posts"),
    ("spannerDatabaseId", SQL),
    ("spannerDatabaseId", "v" * 31),
    ("windowSeconds", ""),
    ("windowSeconds", "0"),
    ("windowSeconds", "-5"),
    ("windowSeconds", "010"),
    ("windowSeconds", "10s"),
    ("windowSeconds", "1e3"),
    ("windowSeconds", "100000"),
    ("rowsPerCommit", "0"),
    ("rowsPerCommit", " 1000"),
    ("postsPerCommit", "0"),
    ("postsPerCommit", "five"),
]


@pytest.mark.parametrize("name, value", BAD_VALUES)
def test_regexes_reject_bad_values(name: str, value: str) -> None:
    assert not matches(anchored_regex(name), value)


@pytest.mark.parametrize("name, value", BAD_VALUES)
def test_the_pipeline_rejects_what_the_metadata_rejects(name: str, value: str) -> None:
    param = next(p for p in all_params() if p.template_name == name)
    with pytest.raises(InvalidParameter):
        parse_values((param,), {param.dest: value})


# --- Dockerfile and Cloud Build ------------------------------------------------------------


def dockerfile_lines() -> list[str]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def setup_beam_version() -> str:
    (version,) = re.findall(r'^BEAM_VERSION\s*=\s*"([^"]+)"', (ROOT / "setup.py").read_text(encoding="utf-8"), re.M)
    return version


def test_dockerfile_beam_version_is_setup_pys() -> None:
    args = [line for line in dockerfile_lines() if line.startswith("ARG BEAM_VERSION=")]
    assert args == [f"ARG BEAM_VERSION={setup_beam_version()}"], "one ARG, equal to setup.py's BEAM_VERSION"
    assert 'f"apache-beam[gcp]=={BEAM_VERSION}"' in (ROOT / "setup.py").read_text(encoding="utf-8")
    # The local-runner fix is fenced to the Beam it was tested on: the same one.
    from local_runner.window_state import TESTED_BEAM_VERSION

    assert TESTED_BEAM_VERSION == setup_beam_version()


def test_base_images_take_their_versions_from_args_only() -> None:
    froms = [line for line in dockerfile_lines() if line.startswith("FROM ")]
    assert froms == [
        "FROM gcr.io/dataflow-templates-base/python311-template-launcher-base:${LAUNCHER_TAG} AS launcher",
        "FROM apache/beam_python3.11_sdk:${BEAM_VERSION}",
    ]
    # The launcher stage gives the image its launcher binary and nothing else (no Python
    # packages, so no second Beam).
    copies = [line for line in dockerfile_lines() if line.startswith("COPY --from=")]
    assert copies == [
        "COPY --from=launcher /opt/google/dataflow/python_template_launcher "
        "/opt/google/dataflow/python_template_launcher"
    ]


def test_dockerfile_installs_the_project_at_build_time_and_downloads_nothing_at_launch() -> None:
    lines = dockerfile_lines()
    run = next(line for line in lines if line.startswith("RUN pip install"))
    assert "pip install --no-cache-dir" in run and re.search(r"pip install [^&]* \.(\s|$)", run)
    assert '= "${BEAM_VERSION}"' in run, "the build checks pip kept the image's Beam"
    assert "ENV PIP_NO_DEPS=True" in lines
    assert "ENV FLEX_TEMPLATE_PYTHON_SETUP_FILE=/template/setup.py" in lines
    assert not any("FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE" in line for line in lines)
    assert lines[-1] == 'ENTRYPOINT ["/opt/apache/beam/boot"]'
    env_at = lines.index("ENV PIP_NO_DEPS=True")
    assert lines.index(run) < env_at, "PIP_NO_DEPS must not apply to the build's own install"


def copied_into_image() -> dict[str, Path]:
    """Image path -> repository path, from the COPY lines (run after WORKDIR /template)."""
    copied: dict[str, Path] = {}
    for line in dockerfile_lines():
        if line.startswith("COPY ") and not line.startswith("COPY --from="):
            *sources, dest = line.split()[1:]
            for source in sources:
                if source.endswith("/") or not dest.endswith("/"):
                    target = dest  # a directory's contents, or a file under a new name
                else:
                    target = dest + Path(source).name
                copied[os.path.normpath(f"/template/{target}")] = ROOT / source.rstrip("/")
    return copied


def test_the_pipeline_arg_comes_after_the_shared_layers() -> None:
    """Every RUN after an ARG depends on its value: declared before the install, PIPELINE would
    make the fold build redo it instead of reusing the streaming build's layers."""
    lines = dockerfile_lines()
    pipeline_arg = lines.index("ARG PIPELINE=streaming")
    assert all(i > pipeline_arg for i, line in enumerate(lines) if "${PIPELINE}" in line)
    assert all(i < pipeline_arg for i, line in enumerate(lines) if line.startswith(("COPY", "RUN pip")))


def test_every_copied_source_exists() -> None:
    assert "WORKDIR /template" in dockerfile_lines()
    for image_path, source in copied_into_image().items():
        assert source.exists(), f"{source} (copied to {image_path}) is missing"


def test_the_image_holds_exactly_the_modules_the_pipelines_import() -> None:
    """The worker image's Python is what the entry files reach through the import graph: no
    module a pipeline needs is missing, and none it never imports (the read side, the tools)
    ships to the workers."""
    import ast

    import grimp

    worker_packages = ("pipeline", "transforms", "spanner_writes", "spanner_store", "schemas")
    graph = grimp.build_graph(*worker_packages, include_external_packages=False)
    reached: set[str] = set()
    pending = [
        node.module
        for kind in KINDS
        for node in ast.walk(ast.parse((TEMPLATES / f"launch_{kind}.py").read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in worker_packages
    ]
    while pending:
        module = pending.pop()
        if module not in reached:
            reached.add(module)
            pending.extend(graph.find_modules_directly_imported_by(module))
    packages = {".".join(module.split(".")[:depth]) for module in reached for depth in (1, 2)}
    needed = {Path(origin_of(name)).relative_to(ROOT) for name in reached | packages}
    shipped = set()
    for source in copied_into_image().values():
        files = source.rglob("*.py") if source.is_dir() else [source]
        shipped |= {f.relative_to(ROOT) for f in files if f.suffix == ".py" and "templates" not in f.parts}
    # Deprecated forwarders of moved modules (spanner_store/moved.py) ship but load nothing there.
    forwarders = {path for path in shipped if "from spanner_store.moved import forward" in (ROOT / path).read_text()}
    assert shipped - {Path("setup.py"), Path("spanner_store/moved.py")} - forwarders == needed
    # The local runner and the read side stay out; every copy is a whole package, no file list.
    assert not any(path.parts[0] in ("local_runner", "spanner_reads") for path in shipped | needed)
    packages_copied = [s for s in copied_into_image().values() if s.name != "setup.py" and "templates" not in s.parts]
    assert packages_copied and all(source.is_dir() for source in packages_copied)


@pytest.mark.parametrize("kind", KINDS)
def test_flex_template_py_file_points_at_an_existing_entry_file(kind: str) -> None:
    (env,) = [line for line in dockerfile_lines() if line.startswith("ENV FLEX_TEMPLATE_PYTHON_PY_FILE=")]
    path = env.split("=", 1)[1].replace("${PIPELINE}", kind)
    assert path == f"/template/templates/launch_{kind}.py"
    source = copied_into_image()[path]
    assert source == TEMPLATES / f"launch_{kind}.py" and source.is_file()
    assert "/template/setup.py" in copied_into_image()


def test_cloudbuild_builds_the_dockerfile_once_per_template() -> None:
    build = yaml.safe_load((TEMPLATES / "cloudbuild.yaml").read_text(encoding="utf-8"))
    steps = {step["id"]: step for step in build["steps"]}
    assert set(steps) == set(KINDS)
    for kind, step in steps.items():
        assert step["name"] == "gcr.io/cloud-builders/docker"
        assert step["args"][0] == "build" and step["args"][-1] == "."
        assert "--file=templates/Dockerfile" in step["args"]
        assert f"--build-arg=PIPELINE={kind}" in step["args"]
        assert f"--tag=${{_{kind.upper()}_IMAGE}}" in step["args"]
    assert build["images"] == [f"${{_{kind.upper()}_IMAGE}}" for kind in KINDS]
    (submit,) = [c for c in argv_of(gcloud_steps.build_steps)(cfg()) if c[:3] == ["gcloud", "builds", "submit"]]
    passed = next(a for a in submit if a.startswith("--substitutions=")).split("=", 1)[1]
    assert {pair.split("=", 1)[0] for pair in passed.split(",")} == {"_STREAMING_IMAGE", "_FOLD_IMAGE"}


# --- the thin entry files ----------------------------------------------------------------


def origin_of(module: str) -> str:
    """The file the module is imported from."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return spec.origin


def load_entry(kind: str):
    spec = importlib.util.spec_from_file_location(f"launch_{kind}", TEMPLATES / f"launch_{kind}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "kind", [pytest.param(kind, marks=pytest.mark.emulators) if kind == "streaming" else kind for kind in KINDS]
)
def test_entry_file_builds_the_graph_and_returns_without_waiting(
    kind: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The streaming build claims its writer generation in Spanner (spanner_writes/writers.py),
    so that case builds against a provisioned database on the emulator."""
    import apache_beam as beam

    submitted = []

    class Submitted:
        def wait_until_finish(self, duration=None):  # noqa: ANN001 - Beam's signature
            raise AssertionError("a flex-template program must not wait for its job")

    def fake_run(pipeline, test_runner_api="AUTO"):  # noqa: ANN001 - Beam's signature
        submitted.append(pipeline)
        return Submitted()

    monkeypatch.setattr(beam.Pipeline, "run", fake_run)
    params = param_by_name(kind)
    argv = [f"--project={PROJECT}"] + [f"--{name}={p.example}" for name, p in params.items()]
    if kind == "streaming":
        stack = request.getfixturevalue("stack")
        argv += [f"--project={stack.project}", f"--instance={stack.instance}", f"--database={stack.database}"]
    load_entry(kind).main(argv)
    assert len(submitted) == 1


# --- configuration -------------------------------------------------------------------------


def test_config_from_environment() -> None:
    config = DeployConfig.from_env(
        {
            "PROJECT": "my-project",
            "REGION": "europe-west1",
            "MAX_WORKERS": "7",
            "STREAMING_ENGINE": "0",
            "UPDATE": "true",
            "WINDOW_SECONDS": "30",
            "POSTS_PER_COMMIT": "",
            "WORKER_SA": "w@other-proj.iam.gserviceaccount.com",
        }
    ).validate()
    assert (config.region, config.max_workers, config.streaming_engine, config.update) == (
        "europe-west1",
        7,
        False,
        True,
    )
    assert config.window_seconds == "30" and config.posts_per_commit is None
    assert config.bucket_name == "my-project-upvotes" and config.spanner_instance_config == "regional-europe-west1"
    assert config.job_sa("streaming") == "w@other-proj.iam.gserviceaccount.com"
    assert config.job_sa("fold") == "upvotes-fold@my-project.iam.gserviceaccount.com"
    assert DeployConfig.from_env({}).project == ""


@pytest.mark.parametrize(
    "environ, message",
    [
        ({}, "PROJECT is required"),
        ({"PROJECT": "My Project"}, "PROJECT="),
        ({"PROJECT": "my-project", "WINDOW_SECONDS": "0"}, "WINDOW_SECONDS="),
        ({"PROJECT": "my-project", "INSTANCE": "Upvotes"}, "INSTANCE="),
        ({"PROJECT": "my-project", "SUBSCRIPTION": "votes sub"}, "SUBSCRIPTION="),
        ({"PROJECT": "my-project", "FOLD_SCHEDULE": "every 10 minutes"}, "FOLD_SCHEDULE="),
        ({"PROJECT": "my-project", "MAX_WORKERS": "0"}, "MAX_WORKERS="),
        ({"PROJECT": "my-project", "STREAMING_ENGINE": "maybe"}, "STREAMING_ENGINE="),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidParameter, match=re.escape(message)):
        DeployConfig.from_env(environ).validate()


# --- dry-run output ------------------------------------------------------------------------


def dry_run(action: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, **env: str) -> list[list[str]]:
    """The commands `upvotes deploy ACTION --dry-run` prints, parsed back with shlex."""
    for field in dataclasses.fields(DeployConfig):
        monkeypatch.delenv(field.metadata["env"], raising=False)
    monkeypatch.setenv("PROJECT", PROJECT)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    deploy_command.add_arguments(parser)
    assert deploy_command.run(parser.parse_args([action, "--dry-run"])) == 0
    out = capsys.readouterr().out
    return [shlex.split(line) for line in out.splitlines() if line and not line.startswith("#")]


def test_dry_run_prints_exactly_the_commands_and_runs_nothing(monkeypatch, capsys) -> None:
    monkeypatch.setattr(gcloud_steps.subprocess, "run", lambda *a, **k: pytest.fail("--dry-run ran a command"))
    config = cfg()
    for action, expected in (
        ("build", argv_of(gcloud_steps.build_steps)),
        ("run", argv_of(gcloud_steps.run_steps)),
        ("schedule", argv_of(gcloud_steps.scheduler_steps)),
        ("iam", argv_of(gcloud_steps.iam_steps)),
        ("setup", argv_of(gcloud_steps.setup_steps)),
        ("provision", argv_of(gcloud_steps.provision_steps)),
    ):
        assert dry_run(action, monkeypatch, capsys) == expected(config), action
    everything = dry_run("all", monkeypatch, capsys)
    assert everything == [step.argv for name in gcloud_steps.STEPS for step in gcloud_steps.STEPS[name](config)]


def test_build_dry_run_names_the_images_metadata_and_template_paths(monkeypatch, capsys) -> None:
    commands = dry_run("build", monkeypatch, capsys, IMAGE_TAG="abc123")
    image = {kind: f"us-central1-docker.pkg.dev/{PROJECT}/upvotes/upvotes-{kind}:abc123" for kind in KINDS}
    submit, *templates = commands
    assert submit[:4] == ["gcloud", "builds", "submit", "."]
    assert "--config=templates/cloudbuild.yaml" in submit
    assert f"--substitutions=_STREAMING_IMAGE={image['streaming']},_FOLD_IMAGE={image['fold']}" in submit
    assert len(templates) == 2
    for kind, command in zip(KINDS, templates):
        assert command[:5] == [
            "gcloud",
            "dataflow",
            "flex-template",
            "build",
            f"gs://{PROJECT}-upvotes/templates/{kind}.json",
        ]
        assert f"--image={image[kind]}" in command
        assert "--sdk-language=PYTHON" in command
        assert f"--metadata-file=templates/{kind}/metadata.json" in command
        assert (ROOT / f"templates/{kind}/metadata.json").is_file()


def parameters_of(command: list[str]) -> dict[str, str]:
    pairs = [arg.split("=", 1)[1] for arg in command if arg.startswith("--parameters=")]
    return dict(pair.split("=", 1) for pair in pairs)


def test_run_dry_run_launches_both_templates_with_their_parameters(monkeypatch, capsys) -> None:
    streaming, fold = dry_run("run", monkeypatch, capsys, MAX_WORKERS="5", EXPERIMENTS="a,b")
    for kind, command in (("streaming", streaming), ("fold", fold)):
        assert command[:4] == ["gcloud", "dataflow", "flex-template", "run"]
        assert f"--template-file-gcs-location=gs://{PROJECT}-upvotes/templates/{kind}.json" in command
        parameters = parameters_of(command)
        for param in PARAMS[kind]:
            assert param.template_name in parameters, param.template_name
            assert matches(anchored_regex(param.template_name), parameters[param.template_name])
        assert parameters["sdk_container_image"] == cfg().image(kind)
        assert set(parameters) == {p.template_name for p in PARAMS[kind]} | {"sdk_container_image"}
        assert f"--service-account-email=upvotes-{kind}@{PROJECT}.iam.gserviceaccount.com" in command
        assert f"--staging-location=gs://{PROJECT}-upvotes/staging" in command
        assert f"--temp-location=gs://{PROJECT}-upvotes/tmp" in command
        assert "--additional-experiments=a,b" in command
        assert not any(
            arg.startswith(("--parameters=project", "--parameters=region", "--parameters=streaming")) for arg in command
        )
    assert "--enable-streaming-engine" in streaming and "--max-workers=5" in streaming
    assert "--enable-streaming-engine" not in fold and "--max-workers=2" in fold
    assert parameters_of(streaming)["inputSubscription"] == f"projects/{PROJECT}/subscriptions/votes-sub"
    assert parameters_of(streaming)["outputDeadletterTopic"] == f"projects/{PROJECT}/topics/votes-dead-letter"
    assert "--update" not in streaming


def test_update_replaces_the_streaming_job_and_the_scheduler_job(monkeypatch, capsys) -> None:
    streaming, fold = dry_run("run", monkeypatch, capsys, UPDATE="1", STREAMING_ENGINE="0")
    assert "--update" in streaming and "--update" not in fold
    assert "--enable-streaming-engine" not in streaming
    (schedule,) = dry_run("schedule", monkeypatch, capsys, UPDATE="1")
    assert schedule[:5] == ["gcloud", "scheduler", "jobs", "update", "http"]


def test_unset_optional_parameters_are_left_to_the_pipeline(monkeypatch, capsys) -> None:
    streaming, _ = dry_run("run", monkeypatch, capsys, WINDOW_SECONDS="", ROWS_PER_COMMIT="", MAX_CLOCK_SKEW_SECONDS="")
    assert set(parameters_of(streaming)) == {p.template_name for p in STREAMING_PARAMS if p.required} | {
        "sdk_container_image"
    }


def test_schedule_dry_run_posts_the_fold_launch(monkeypatch, capsys) -> None:
    (command,) = dry_run("schedule", monkeypatch, capsys, FOLD_SCHEDULE="*/5 * * * *")
    assert command[:6] == ["gcloud", "scheduler", "jobs", "create", "http", "upvotes-fold"]
    assert "--schedule=*/5 * * * *" in command
    assert (
        f"--uri=https://dataflow.googleapis.com/v1b3/projects/{PROJECT}/locations/us-central1/flexTemplates:launch"
        in command
    )
    assert "--http-method=POST" in command
    assert f"--oauth-service-account-email=upvotes-scheduler@{PROJECT}.iam.gserviceaccount.com" in command
    assert "--oauth-token-scope=https://www.googleapis.com/auth/cloud-platform" in command
    body = json.loads(next(a for a in command if a.startswith("--message-body=")).split("=", 1)[1])
    assert body == gcloud_steps.launch_request(cfg())
    assert body["launchParameter"]["containerSpecGcsPath"] == f"gs://{PROJECT}-upvotes/templates/fold.json"


# --- the Cloud Scheduler job ---------------------------------------------------------------


def decoded_body(job: dict) -> dict:
    return json.loads(base64.b64decode(job["httpTarget"]["body"]).decode("utf-8"))


@pytest.mark.parametrize("posts_per_commit", ["500", "250", None])
def test_scheduler_job_launches_the_fold_template(posts_per_commit: str | None) -> None:
    config = cfg(posts_per_commit=posts_per_commit, fold_schedule="*/15 * * * *", fold_max_workers=4)
    job = gcloud_steps.scheduler_job(config)
    assert json.loads(json.dumps(job)) == job, "the job body is JSON"
    assert job["schedule"] == "*/15 * * * *" and job["timeZone"] == "Etc/UTC"
    assert job["name"] == f"projects/{PROJECT}/locations/us-central1/jobs/upvotes-fold"
    target = job["httpTarget"]
    assert target["httpMethod"] == "POST"
    assert (
        target["uri"]
        == f"https://dataflow.googleapis.com/v1b3/projects/{PROJECT}/locations/us-central1/flexTemplates:launch"
    )
    assert target["headers"] == {"Content-Type": "application/json"}
    assert target["oauthToken"] == {
        "serviceAccountEmail": f"upvotes-scheduler@{PROJECT}.iam.gserviceaccount.com",
        "scope": "https://www.googleapis.com/auth/cloud-platform",
    }
    launch = decoded_body(job)["launchParameter"]
    assert (
        launch["containerSpecGcsPath"] == config.template_path("fold") == f"gs://{PROJECT}-upvotes/templates/fold.json"
    )
    assert launch["jobName"] == "upvotes-fold"
    required = {p.template_name for p in FOLD_PARAMS if p.required}
    optional_set = ({"postsPerCommit"} if posts_per_commit else set()) | {
        "dataBoost",
        "fullScan",
        "maxDeltaRowsPerRun",
    }  # defaults each
    assert set(launch["parameters"]) == required | optional_set
    assert launch["parameters"]["spannerInstanceId"] == "upvotes"
    assert launch["parameters"]["spannerDatabaseId"] == "votes"
    if posts_per_commit:
        assert launch["parameters"]["postsPerCommit"] == posts_per_commit
    for name, value in launch["parameters"].items():
        assert matches(anchored_regex(name), value)
    assert launch["environment"] == {
        "serviceAccountEmail": f"upvotes-fold@{PROJECT}.iam.gserviceaccount.com",
        "tempLocation": f"gs://{PROJECT}-upvotes/tmp",
        "stagingLocation": f"gs://{PROJECT}-upvotes/staging",
        "maxWorkers": 4,
        "sdkContainerImage": config.image("fold"),
    }


# --- IAM -----------------------------------------------------------------------------------


def bindings(config: DeployConfig) -> list[tuple[str, str, str, str]]:
    """(resource kind, resource, member, role) of every add-iam-policy-binding command."""
    found = []
    for command in argv_of(gcloud_steps.iam_steps)(config):
        assert "add-iam-policy-binding" in command, command
        verb = command.index("add-iam-policy-binding")
        member = next(a for a in command if a.startswith("--member=")).split("=", 1)[1]
        role = next(a for a in command if a.startswith("--role=")).split("=", 1)[1]
        found.append((" ".join(command[1:verb]), command[verb + 1], member, role))
    return found


def test_publishers_may_only_publish_to_the_votes_topic() -> None:
    publisher = f"serviceAccount:upvotes-publisher@{PROJECT}.iam.gserviceaccount.com"
    assert [b for b in bindings(cfg()) if b[2] == publisher] == [
        ("pubsub topics", "votes", publisher, "roles/pubsub.publisher")
    ]


def test_no_project_level_pubsub_or_spanner_role_and_no_basic_role() -> None:
    for kind, _resource, member, role in bindings(cfg()):
        if kind == "projects":
            assert role in ("roles/dataflow.worker", "roles/dataflow.developer"), (member, role)
        assert role not in ("roles/editor", "roles/owner", "roles/viewer")


def test_workers_get_exactly_what_they_use() -> None:
    found = set(bindings(cfg()))
    streaming = f"serviceAccount:upvotes-streaming@{PROJECT}.iam.gserviceaccount.com"
    fold = f"serviceAccount:upvotes-fold@{PROJECT}.iam.gserviceaccount.com"
    assert ("pubsub subscriptions", "votes-sub", streaming, "roles/pubsub.subscriber") in found
    assert ("pubsub subscriptions", "votes-sub", streaming, "roles/pubsub.viewer") in found
    assert ("pubsub topics", "votes-dead-letter", streaming, "roles/pubsub.publisher") in found
    assert not any(m == fold and "pubsub" in k for k, _, m, _ in found), "the fold uses no Pub/Sub"
    for member in (streaming, fold):
        assert ("projects", PROJECT, member, "roles/dataflow.worker") in found
        assert ("spanner databases", "votes", member, "roles/spanner.databaseUser") in found
        assert ("storage buckets", f"gs://{PROJECT}-upvotes", member, "roles/storage.objectAdmin") in found
        assert ("artifacts repositories", "upvotes", member, "roles/artifactregistry.reader") in found
    spanner = [c for c in argv_of(gcloud_steps.iam_steps)(cfg()) if c[:3] == ["gcloud", "spanner", "databases"]]
    assert spanner and all("--instance=upvotes" in c for c in spanner)
    assert not any(role.startswith("roles/spanner") and kind != "spanner databases" for kind, _, _, role in found)


def test_data_boost_gives_the_fold_the_data_boost_reader_role_on_the_database_only() -> None:
    fold = f"serviceAccount:upvotes-fold@{PROJECT}.iam.gserviceaccount.com"
    role = "roles/spanner.databaseReaderWithDataBoost"
    assert not any(r == role for *_, r in bindings(cfg()))
    boosted = [(kind, resource, member) for kind, resource, member, r in bindings(cfg(data_boost="true")) if r == role]
    assert boosted == [("spanner databases", "votes", fold)]


def test_the_scheduler_can_launch_folds_only() -> None:
    scheduler = f"serviceAccount:upvotes-scheduler@{PROJECT}.iam.gserviceaccount.com"
    assert sorted((k, r, role) for k, r, m, role in bindings(cfg()) if m == scheduler) == sorted(
        [
            ("projects", PROJECT, "roles/dataflow.developer"),
            ("iam service-accounts", f"upvotes-fold@{PROJECT}.iam.gserviceaccount.com", "roles/iam.serviceAccountUser"),
            ("storage buckets", f"gs://{PROJECT}-upvotes", "roles/storage.objectViewer"),
        ]
    )


# --- running, metadata action and the guide ------------------------------------------------


def test_running_stops_at_the_first_failure() -> None:
    calls: list[list[str]] = []
    codes = iter([0, 3, 0])

    def fake(argv: list[str]) -> int:
        calls.append(argv)
        return next(codes)

    steps = [
        gcloud_steps.Step(["gcloud", "one"]),
        gcloud_steps.Step(["upvotes", "provision", "--x"]),
        gcloud_steps.Step(["gcloud", "three"]),
    ]
    out, err = io.StringIO(), io.StringIO()
    assert gcloud_steps.execute_steps(steps, out, err, run=fake) == 3
    assert len(calls) == 2
    assert calls[1][1:3] == ["-m", "upvotes.cli"] and calls[1][3:] == ["provision", "--x"]
    assert "step 2 of 3 failed with exit code 3" in err.getvalue() and "upvotes provision --x" in err.getvalue()


def test_missing_gcloud_is_explained() -> None:
    def missing(argv: list[str]) -> int:
        raise FileNotFoundError(argv[0])

    err = io.StringIO()
    assert gcloud_steps.execute_steps([gcloud_steps.Step(["gcloud", "x"])], io.StringIO(), err, run=missing) == 127
    assert "Google Cloud CLI" in err.getvalue()


def metadata_args(root: Path, *flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    deploy_command.add_arguments(parser)
    return parser.parse_args(["metadata", "--root", str(root), *flags])


def test_metadata_action_writes_then_checks(tmp_path: Path, capsys) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "README.md").write_text(
        f"# guide\n{template_metadata.TABLE_START}\nold table\n{template_metadata.TABLE_END}\nrest\n", encoding="utf-8"
    )
    assert deploy_command.run(metadata_args(tmp_path, "--check")) == 1
    assert deploy_command.run(metadata_args(tmp_path)) == 0
    assert deploy_command.run(metadata_args(tmp_path, "--check")) == 0
    for kind in KINDS:
        assert json.loads(
            template_metadata.metadata_path(kind, tmp_path).read_text()
        ) == template_metadata.template_metadata(kind)
    readme = (tmp_path / "templates" / "README.md").read_text()
    assert (
        "old table" not in readme
        and template_metadata.parameter_table_markdown() in readme
        and readme.endswith("rest\n")
    )
    template_metadata.metadata_path("fold", tmp_path).write_text("{}\n")
    assert deploy_command.run(metadata_args(tmp_path, "--check")) == 1
    assert "fold/metadata.json" in capsys.readouterr().err


def test_build_refuses_stale_metadata(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PROJECT", PROJECT)
    monkeypatch.setattr(gcloud_steps.subprocess, "run", lambda *a, **k: pytest.fail("ran a command"))
    parser = argparse.ArgumentParser()
    deploy_command.add_arguments(parser)
    assert deploy_command.run(parser.parse_args(["build", "--root", str(tmp_path)])) == 1
    assert "upvotes deploy metadata" in capsys.readouterr().err


def test_markdown_prints_the_parameter_table(capsys) -> None:
    assert deploy_command.run(metadata_args(ROOT, "--markdown")) == 0
    assert capsys.readouterr().out == template_metadata.parameter_table_markdown()


def test_the_guide_table_is_the_generated_one() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index(template_metadata.TABLE_START) + len(template_metadata.TABLE_START)
    table = text[start : text.index(template_metadata.TABLE_END)].strip("\n") + "\n"
    assert table == template_metadata.parameter_table_markdown()
    for param in all_params():
        assert f"| `--{param.flag}` | `{param.template_name}` |" in table


def test_the_guide_covers_every_step_metric_and_knob() -> None:
    text = README.read_text(encoding="utf-8")
    for needle in (
        "upvotes deploy setup",
        "upvotes deploy provision",
        "upvotes deploy iam",
        "upvotes deploy build",
        "upvotes deploy run",
        "upvotes deploy schedule",
        "--create-instance",
        "ParseVotes/accepted",
        "ParseVotes/rejected_",
        "WriteDeltaRows/rows_written",
        "rows_already_written",
        "WriteDeltaRows/commits",
        "transient_retries",
        "rows_dead_lettered",
        "FoldDeltas/posts_folded",
        "FoldDeltas/deltas_folded",
        "votes-dead-letter-kept",
        "WINDOW_SECONDS",
        "FOLD_SCHEDULE",
        "MAX_WORKERS",
        "Streaming Engine",
        "ROWS_PER_COMMIT",
    ):
        assert needle in text, needle
