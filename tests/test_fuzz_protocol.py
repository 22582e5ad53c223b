"""Hypothesis fuzzing of everything that reads untrusted bytes: the application-channel
parser, the control-channel models, the line framing, time limits and job files.

The property is always the same: whatever comes in, out comes a value or one of the
package's typed errors (ProtocolError, pydantic's ValidationError, ValueError from the
time parser, JobFileError) -- never another exception type, which on the daemon side would
be a dropped connection or a traceback in place of an answer.
"""

from __future__ import annotations

import asyncio
import json
import socket
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from elastic_protocol.appchannel import (
    APP_VERBS,
    DAEMON_VERBS,
    Message,
    error_line,
    parse,
    parse_count,
)
from elastic_protocol.control import REQUEST_ADAPTER, Response
from elastic_protocol.errors import MalformedMessage, ProtocolError
from elastic_protocol.framing import LineSocket, read_line
from elastic_protocol.jobspec import JobSpec, format_validation_errors
from elastic_protocol.timefmt import parse_time_limit
from elasticd.errors import JobFileError
from elasticd.jobfile import load_job_file

pytestmark = pytest.mark.timeout(60)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Bytes that look like protocol lines often enough to get past the first checks.
_words = st.sampled_from(sorted(APP_VERBS | DAEMON_VERBS) + ["order=1", "order=x", "=", "1", "-3", "node1", "é"])
line_bytes = st.one_of(
    st.binary(max_size=300),
    st.lists(_words, max_size=8).map(lambda ws: " ".join(ws).encode()),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_ops = st.sampled_from(["hello", "submit", "cancel", "queue", "status", "wait", "resize", "stop", "x", ""])
request_like = st.builds(
    lambda op, body: {"op": op, **body},
    _ops,
    st.dictionaries(st.sampled_from(["version", "secret", "spec", "job_ids", "all", "timeout", "job_id", "nodes", "client"]),
                    json_values, max_size=4),
)

_spec_keys = ["name", "command", "nodes", "kind", "time_limit", "working_dir", "env", "output", "error",
              "submit_offset", "model", "evolution", "min", "max", "preferred", "speedup", "duration"]
spec_like = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_spec_keys), inner, max_size=6),
    max_leaves=25,
)


@FUZZ
@given(line_bytes)
def test_app_channel_parser_returns_a_message_or_a_typed_error(line: bytes) -> None:
    for verbs in (APP_VERBS, DAEMON_VERBS):
        try:
            msg = parse(line, verbs)
        except MalformedMessage:
            continue
        assert msg.verb in verbs
        try:
            n = parse_count(msg)
        except MalformedMessage:
            continue
        assert n > 0


_token = st.text(alphabet=string.ascii_letters + string.digits + "-_.:", min_size=1, max_size=12)


@FUZZ
@given(st.sampled_from(sorted(APP_VERBS)), st.lists(_token, max_size=5), st.dictionaries(_token, _token, max_size=3))
def test_encoded_messages_parse_back_to_themselves(verb: str, args: list[str], options: dict[str, str]) -> None:
    msg = Message(verb, tuple(args), options)
    assert parse(msg.encode(), APP_VERBS) == msg


@FUZZ
@given(st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=20), st.text(max_size=600))
def test_error_lines_are_one_printable_ascii_line_a_client_can_parse(code: str, message: str) -> None:
    line = error_line(code, message)
    assert b"\n" not in line and b"\r" not in line
    msg = parse(line, DAEMON_VERBS)
    assert msg.verb == "error" and msg.args[0] == code


@FUZZ
@given(st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode()),
                 request_like.map(lambda v: json.dumps(v).encode())))
def test_control_requests_validate_or_raise_validation_error(raw: bytes) -> None:
    try:
        REQUEST_ADAPTER.validate_json(raw)
    except ValidationError as exc:
        format_validation_errors(exc.errors())
    try:
        Response.model_validate_json(raw)
    except ValidationError:
        pass


def test_deeply_nested_json_is_a_validation_error() -> None:
    for raw in (b"[" * 100_000, b'{"op":' * 20_000, b"1" * 60_000):
        with pytest.raises(ValidationError):
            REQUEST_ADAPTER.validate_json(raw)


@FUZZ
@given(st.one_of(st.text(max_size=40), st.integers(), st.booleans(),
                 st.from_regex(r"\A[0-9]{1,6}(-[0-9]{1,3})?(:[0-9]{1,3}){0,3}\Z")))
def test_time_limits_parse_or_raise_value_error(text: str | int) -> None:
    try:
        seconds = parse_time_limit(text)
    except ValueError:
        return
    assert seconds is None or seconds > 0


@FUZZ
@given(spec_like)
def test_job_spec_validation_raises_only_validation_errors(data: object) -> None:
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        lines = format_validation_errors(exc.errors())
        assert lines and all(isinstance(line, str) for line in lines)
        return
    lo, hi, pref = spec.node_bounds
    assert 1 <= lo <= pref <= hi


_toml_values = st.one_of(
    st.integers(-3, 10).map(str), st.text(max_size=12).map(json.dumps), st.just("{ min = 1, max = 2 }"),
    st.just('["sleep", "1"]'), st.just("[]"), st.just("1.5"), st.just("true"), st.text(max_size=8),
)
toml_text = st.one_of(
    st.lists(st.tuples(st.sampled_from(_spec_keys + ["bogus"]), _toml_values), max_size=8)
    .map(lambda kv: "\n".join(f"{k} = {v}" for k, v in kv)),
    st.text(max_size=200),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.one_of(toml_text.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=200)))
def test_job_files_load_or_raise_job_file_error(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "job.toml"
    path.write_bytes(raw)
    try:
        load_job_file(path, tmp_path)
    except JobFileError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)


def test_job_file_with_a_nul_in_a_path_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    for field in ("working_dir", "output", "error"):
        path.write_text(f'name = "x"\ncommand = ["true"]\nnodes = 1\n{field} = "a\\u0000b"\n')
        with pytest.raises(JobFileError) as info:
            load_job_file(path, tmp_path)
        assert any(p.startswith(f"{field}:") for p in info.value.problems), info.value.problems
    path.write_text('name = "x"\ncommand = ["a\\u0000b"]\nnodes = 1\nenv = { A = "x\\u0000" }\n')
    with pytest.raises(JobFileError) as info:
        load_job_file(path, tmp_path)
    assert any(p.startswith("command.0:") for p in info.value.problems), info.value.problems
    assert any(p.startswith("env.A:") for p in info.value.problems), info.value.problems


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(4, 64))
def test_async_framing_yields_lines_or_typed_errors(chunks: list[bytes], limit: int) -> None:
    async def run() -> None:
        reader = asyncio.StreamReader(limit=limit + 1)
        for c in chunks:
            reader.feed_data(c)
        reader.feed_eof()
        while True:
            try:
                line = await read_line(reader, limit)
            except ProtocolError:
                return
            if line is None:
                return
            assert len(line) <= limit and b"\n" not in line

    asyncio.run(run())


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(4, 64))
def test_blocking_framing_yields_lines_or_typed_errors(chunks: list[bytes], limit: int) -> None:
    a, b = socket.socketpair()
    try:
        a.sendall(b"".join(chunks))
        a.close()
        io = LineSocket(b, limit)
        while True:
            try:
                line = io.read_line()
            except ProtocolError:
                return
            if line is None:
                return
            assert len(line) <= limit and b"\n" not in line
    finally:
        b.close()
