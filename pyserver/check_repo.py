"""`python -m pyserver check-repo DIR [DIR ...]`: validates a model repository
offline, without starting a server or running a model, and prints every
problem as ``file:line: model 'name': message``. Exit status 1 when there is
any problem, 0 when every model would load as far as the files tell.

Checked per model: the config parses (file:line:col of the error), is
complete and valid as the server normalizes it (auto-complete as the
server does it: ONNX files are read, a Python model's auto_complete_config
runs; --disable-auto-complete-config checks the files as written), the
backend exists, the version policy selects at least one version folder and
each selected one holds the model file, label files exist, and warmup
samples can be built (data files present and large enough). For ONNX
models the declared inputs and outputs are compared with the model file.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pyserver._proto import ModelConfig
from pyserver.config import CONFIG_FILENAME, DEFAULT_MODEL_FILENAMES
from pyserver.kernel.errors import ServerError
from pyserver.model import warmup
from pyserver.repository import loader as repository
from pyserver.repository import remote

_FIELD_NAMES = {f.name for f in ModelConfig.DESCRIPTOR.fields}
for _desc in ModelConfig.DESCRIPTOR.nested_types:
    _FIELD_NAMES.update(f.name for f in _desc.fields)


@dataclass
class Problem:
    model: str
    path: Path | str  # a str for an object-storage URI (Path would fold its //)
    line: int  # 0: the file as a whole
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: model '{self.model}': {self.message}"

    def name_by(self, folder: str, uri: str) -> None:
        """Names a file of a repository's local copy (``folder``) by the
        repository's URI, in the path and in the message."""
        path = str(self.path)
        if path == folder or path.startswith(folder + "/"):
            self.path = uri + path[len(folder):]
        self.message = self.message.replace(folder, uri)


def locate(text: str, message: str, model_name: str = "") -> int:
    """The config line a message is about: the line naming a quoted name
    from the message (an input, output or group), else the first line that
    sets a field the message names; 0 when neither is found."""
    lines = text.splitlines()
    for quoted in re.findall(r"'([^']+)'", message):
        if quoted == model_name:
            continue
        pattern = re.compile(r'"' + re.escape(quoted) + r'"')
        for i, line in enumerate(lines, 1):
            if pattern.search(line):
                return i
    for word in re.findall(r"[a-z_]+", message):
        if word in _FIELD_NAMES and "_" in word:
            pattern = re.compile(r"\b" + re.escape(word) + r"\s*[:{\[]")
            for i, line in enumerate(lines, 1):
                if pattern.search(line):
                    return i
    return 0


def _parse_location(message: str) -> tuple[Path, int] | None:
    """file:line from a parse error message ("... <file>:<line>:<col>: ...")."""
    m = re.search(r"model config (\S+?):(\d+):(\d+)", message)
    if m:
        return Path(m.group(1)), int(m.group(2))
    return None


def check_model(model: repository.ModelDir, options: repository.LoadOptions) -> list[Problem]:
    problems: list[Problem] = []
    config_file = repository.config_path(model.path, options.config_name)
    text = config_file.read_text(errors="replace") if config_file.is_file() else ""

    def add(message: str, path: Path | None = None, line: int | None = None):
        # The location is printed in front: drop the model prefix of core messages.
        message = re.sub(r"^model '" + re.escape(model.name) + r"'(:| version)\s*", "", message)
        if line is None:
            line = locate(text, message, model.name) if text else 0
        problems.append(Problem(model.name, path or config_file, line, message))

    # Python models: a syntax error is reported where it is, without
    # starting a worker for auto-complete (which would only report it later).
    for version_dir in sorted(repository.version_folders(model.path).values()):
        source = version_dir / DEFAULT_MODEL_FILENAMES["python"]
        if source.is_file():
            try:
                compile(source.read_bytes(), str(source), "exec")
            except SyntaxError as err:
                add(f"SyntaxError: {err.msg}", source, err.lineno or 0)
            except ValueError as err:  # e.g. null bytes
                add(f"cannot compile: {err}", source, 0)
    if problems:
        return problems
    try:
        config, backend, available, filename, found = repository.prepare_config(model, None, options)
    except ServerError as err:
        where = _parse_location(err.message)
        if where:
            add(err.message.split(": ", 1)[1] if ": " in err.message else err.message,
                where[0], where[1])
        else:
            add(err.message)
        return problems

    versions = repository.select_versions(config, available)
    if not versions:
        which = config.version_policy.WhichOneof("policy_choice")
        if which == "specific" and available:
            add(f"version_policy selects versions {list(config.version_policy.specific.versions)}"
                f" but the model folder has {sorted(available)}")
        else:
            add(f"no version folder to load in {model.path} (expected e.g. "
                f"1/{DEFAULT_MODEL_FILENAMES.get(backend, 'model')})", model.path, 0)
    for number in versions:
        model_file = available[number] / filename
        if not model_file.exists() and getattr(found, "model_file_required", True):
            add(f"version {number}: {model_file} not found", model_file, 0)
        elif backend == "onnxruntime":
            for message in _check_onnx_io(config, model_file):
                add(message)
    for out in config.output:
        if out.label_filename and not (model.path / out.label_filename).is_file():
            add(f"output '{out.name}' label_filename {model.path / out.label_filename} not found")
    try:
        warmup.build_samples(config, model.path)
    except ServerError as err:
        add(f"model_warmup: {err.message}")
    names = {t.name for t in config.input}
    for setting in config.model_warmup:
        for name in setting.inputs:
            if name not in names:
                add(f"model_warmup sample '{setting.name}' feeds input '{name}', which the model "
                    "does not declare")
    return problems


def _check_onnx_io(config, model_file: Path) -> list[str]:
    """Declared inputs/outputs against the ONNX graph (read, not run)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    try:
        session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    except Exception as err:
        return [f"onnxruntime cannot load {model_file}: {err}"]
    have_in = {i.name for i in session.get_inputs()}
    have_out = {o.name for o in session.get_outputs()}
    out = []
    for t in config.input:
        if t.name not in have_in:
            out.append(f"input '{t.name}' is not an input of {model_file.name} "
                       f"(it has {sorted(have_in)})")
    for t in config.output:
        if t.name not in have_out:
            out.append(f"output '{t.name}' is not an output of {model_file.name} "
                       f"(it has {sorted(have_out)})")
    return out


def _fetch_remote(uri: str) -> tuple[remote.RemoteRepository | None, list[Problem]]:
    """An object-storage repository fetched into its local copy (the cache
    the server would use), and the problems of the fetch: the repository
    unreachable, or models whose objects did not all arrive."""
    try:
        mirror = remote.RemoteRepository(uri)
        errors = mirror.sync()
    except ServerError as err:
        return None, [Problem("", uri, 0, err.message)]
    base = uri.rstrip("/")
    return mirror, [Problem(name, f"{base}/{name}", 0, message) for name, message in sorted(errors.items())]


def check(repositories: list[str], options: repository.LoadOptions) -> tuple[list[Problem], int]:
    """Every problem in the repositories, and how many models were checked.
    A repository in object storage (s3://, gs://, as://) is fetched first,
    as the server would fetch it, and its problems name the objects' URIs."""
    problems: list[Problem] = []
    mirrors: list[tuple[remote.RemoteRepository, str]] = []
    local = []
    try:
        for repo in repositories:
            if not remote.is_remote(repo):
                local.append(repo)
                continue
            mirror, fetch_problems = _fetch_remote(repo)
            problems.extend(fetch_problems)
            if mirror is None:
                return problems, 0
            mirrors.append((mirror, repo.rstrip("/")))
            local.append(str(mirror.root))
        found, count = _check_local(local, options)
        for problem in problems + found:
            for mirror, uri in mirrors:
                problem.name_by(str(mirror.root), uri)
        return problems + found, count
    finally:
        for mirror, _ in mirrors:
            mirror.close()


def _check_local(repositories: list[str], options: repository.LoadOptions) -> tuple[list[Problem], int]:
    problems = []
    for repo in repositories:
        if (Path(repo) / CONFIG_FILENAME).is_file():
            return [Problem(Path(repo).name, Path(repo) / CONFIG_FILENAME, 0,
                            f"{repo} is a model folder, not a repository: pass the folder "
                            "that contains it")], 0
    try:
        found, duplicates = repository.scan(repositories)
    except ServerError as err:
        return [Problem("", Path(repositories[0]), 0, err.message)], 0
    for name, reason in sorted(duplicates.items()):
        problems.append(Problem(name, Path(name), 0, reason + " (" + ", ".join(
            str(Path(r) / name) for r in repositories if (Path(r) / name).is_dir()) + ")"))
    for name in sorted(found):
        problems.extend(check_model(found[name], options))
    return problems, len(found) + len(duplicates)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pyserver check-repo",
                                description="validate a model repository without serving it")
    p.add_argument("repository", nargs="+",
                   help="model repository folder(s) or object-storage URI(s) (s3://, gs://, as://)")
    p.add_argument("--disable-auto-complete-config", action="store_true",
                   help="check config.pbtxt as written (as the server flag)")
    p.add_argument("--model-config-name", default="",
                   help="check <model>/configs/NAME.pbtxt where present (as the server flag)")
    p.add_argument("--backend-config", action="append", default=[],
                   metavar="[BACKEND,]KEY=VALUE", help="as the server flag")
    args = p.parse_args(argv)
    default_mbs = 4
    for item in args.backend_config:
        key, _, value = item.split(",", 1)[-1].partition("=")
        if key == "default-max-batch-size":
            default_mbs = int(value)
    options = repository.LoadOptions(auto_complete=not args.disable_auto_complete_config,
                                     default_max_batch_size=default_mbs,
                                     config_name=args.model_config_name)
    problems, count = check(args.repository, options)
    for problem in problems:
        print(problem)
    bad = len({p.model for p in problems})
    if problems:
        print(f"{len(problems)} problem(s) in {bad} of {count} model(s)", file=sys.stderr)
        return 1
    print(f"{count} model(s) checked, no problems found ({CONFIG_FILENAME} files, version "
          "folders, model files, labels, warmup data)", file=sys.stderr)
    return 0
