"""Reading job files: TOML syntax errors name line and column, field errors name the field."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import ValidationError

from elastic_protocol.jobspec import JobSpec, env_problems, format_validation_errors
from elastic_protocol.version import MAX_JOB_FILE_BYTES
from elasticd.errors import JobFileError

_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def load_job_file(path: Path, submit_dir: Path | None = None) -> JobSpec:
    """Parse and validate one job file.

    A relative working_dir is taken from the job file's folder (so a batch folder works
    from anywhere); with no working_dir the job runs where it was submitted, as in Slurm.
    """
    try:
        # Read up to one byte past the limit, whatever stat says: a device or a pipe
        # (/dev/zero, <(yes)) has no size, and would otherwise be read without end.
        with path.open("rb") as f:
            raw = f.read(MAX_JOB_FILE_BYTES + 1)
        if len(raw) > MAX_JOB_FILE_BYTES:
            size = path.stat().st_size
            held = f"{size} bytes" if size > MAX_JOB_FILE_BYTES else f"more than {MAX_JOB_FILE_BYTES} bytes"
            raise JobFileError(str(path), [(f"{held}, more than a job file may hold ({MAX_JOB_FILE_BYTES // 1024} "
                                           "KiB): put data in files the job reads, not in the job file")])
    except OSError as exc:
        raise JobFileError(str(path), [f"cannot read file: {exc.strerror}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise JobFileError(str(path), [f"not UTF-8 text (byte {exc.start})"]) from None
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _AT.search(msg)
        where = f"line {m.group(1)}, column {m.group(2)}" if m else "unknown position"
        text = _AT.sub("", msg).strip()
        raise JobFileError(str(path), [f"TOML syntax error at {where}: {text}"]) from None
    wd = data.get("working_dir")
    if isinstance(wd, str) and "\0" not in wd:  # a NUL is left for validation to name
        data["working_dir"] = str((path.parent / Path(wd).expanduser()).resolve())
    elif wd is None:
        data["working_dir"] = str((submit_dir or Path.cwd()).resolve())
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        raise JobFileError(str(path), format_validation_errors(exc.errors())) from None
    if problems := env_problems(spec):
        raise JobFileError(str(path), problems)
    assert spec.working_dir is not None
    if not Path(spec.working_dir).is_dir():
        raise JobFileError(str(path), [f"working_dir: {spec.working_dir} is not a directory"])
    return spec


def job_files(target: Path) -> list[Path]:
    """A file, or every *.toml in a folder in name order (a batch)."""
    if target.is_dir():
        files = sorted(target.glob("*.toml"))
        if not files:
            raise JobFileError(str(target), ["folder holds no *.toml job files"])
        return files
    return [target]
