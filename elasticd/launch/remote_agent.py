"""Runs on a node, sent over SSH by the SSH launcher: a one-line bootstrap given to
`python -I -S -c` reads this file's source from the channel's stdin and runs it with
`ROLE ARGS...` (so `ps` on the node shows a short command line, not this file).

Standard library only and no import of elasticd: a node needs a Python, not the package.
The source travels with every call, so the daemon and its nodes never disagree on it.

Roles:
  spawn                 read a JSON launch description on stdin; start the job's command in
                        a session of its own, detached from the SSH connection, under a
                        monitor that records its exit status in DIR/TOKEN.st; print
                        `ok PGID` or `error TEXT`
  watch DIR HB          print `exit TOKEN CODE SIGNAL` for every status file that appears in
                        DIR (`? ?` when a monitor died without one), and `hb` every HB
                        seconds; ends when its stdin closes (the SSH channel went away)
  end GRACE WAIT DIR [tag=TAG/JOB/HOST] [passes-on] TOKEN:PGID...
                        let the groups exit for GRACE s, SIGTERM them, SIGKILL what is left
                        after WAIT s; print `st TOKEN CODE SIGNAL` per token, then `gone`,
                        or `left PID...` if something survived SIGKILL. With a tag, the
                        job's processes on this node that left its groups (setsid, double
                        fork) and carry ELASTIC_TAG=TAG/JOB/HOST are ended with them, each
                        sent one SIGTERM (none with passes-on: the command passes its own
                        on to them, as mpirun does to its ranks)
  procs DIR JOB...      the processes recorded in DIR for these jobs (tokens JOB.*), oldest
                        first: `proc TOKEN PGID CODE SIGNAL`, with `- -` while the monitor
                        still waits for it and `? ?` when the monitor died without a
                        record; then `done` (what a restarted daemon takes over)
  cleanup DIR [JOB...]  remove the records in DIR but those of the listed jobs (still tracked)
                        and those whose monitor still waits for its process, then DIR itself
                        and its parent once empty; print `gone`, or `kept N` (files left)
  sweep TAG HOST WAIT [dir=DIR] [mpi=JOB...] [JOB...]
                        end every process on this node whose environment carries
                        ELASTIC_TAG=TAG/JOB/HOST for a JOB not listed (jobs of an earlier
                        run of the same state directory that nobody tracks any more), and
                        every one in this node's network namespace carrying
                        ELASTIC_MPI_OWNER=TAG/JOB (an MPI run's ranks, which a remote orted
                        starts without the host's ELASTIC_TAG) for a JOB listed neither way:
                        SIGTERM, SIGKILL after WAIT s; print `ended JOB N` per job, then
                        `gone`, or `left PID...` if something survived SIGKILL. With DIR,
                        the records there of the jobs not listed are removed once their
                        monitors are done (waiting a moment for those of the processes just
                        ended): no daemon reads them any more

The job's process is the leader of a new session and process group (its pid is the
PGID the daemon records), so signalling -PGID reaches it and its children, and never
the monitor, which lives in a session of its own and outlives them to record the status.

The monitor opens the job's output files without waiting, so that `spawn` answers at once
(a spawn that hung would hold the node's one SSH call thread, then time out and have the
node taken for down). An open that would wait -- a FIFO no process reads yet, a file under
another process's lease -- is left to the job's process: it says it started, then opens the
file (waiting for a reader, as a Slurm job step would) and execs the command. A command
that cannot be run is still an `error` answer, checked before that open; an open that
fails after all ends the process with status 2, its reason in the error file if that one
is open.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import stat
import sys
import time
from collections.abc import Collection, Iterable
from typing import Any

# A record's size on disk, allocated before the job starts (_reserve): the exit status is then
# written into space the node's /tmp already gave, and a /tmp that filled up meanwhile cannot
# lose it (the job would pass for FAILED 255, its status unknown).
_RECORD_BYTES = 64


def _reserve(path: str) -> int:
    """PATH.tmp created with _RECORD_BYTES of blanks; its fd. Raises OSError (ENOSPC) when
    the status directory cannot hold it: nothing must start that could not be recorded."""
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if os.write(fd, b" " * _RECORD_BYTES) != _RECORD_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    except OSError:
        os.close(fd)
        _unlink_quietly(path + ".tmp")
        raise
    return fd


def _commit(fd: int, path: str, text: str) -> None:
    """Write TEXT over the blanks _reserve wrote (no new space needed) and put it in place."""
    data = text.encode()
    try:
        os.pwrite(fd, data + b" " * (_RECORD_BYTES - len(data)), 0)
    finally:
        os.close(fd)
    os.replace(path + ".tmp", path)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _report(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    finally:
        os.close(fd)


_OUTPUT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOCTTY


def _open_output(path: str) -> int | None:
    """The job's output file opened without waiting; None when the open would wait (ENXIO: a
    FIFO without a reader; EAGAIN: a lease). Blocking again once open, for the job's writes."""
    try:
        fd = os.open(path, _OUTPUT_FLAGS | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.EAGAIN or exc.errno == errno.ENXIO and _is_fifo(path):
            return None
        raise
    os.set_blocking(fd, True)
    return fd


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _find_program(name: str, env: dict[str, str]) -> str:
    """What execvpe would run, found before the output is opened; raises as exec would."""
    if "/" in name:
        candidates = [name]
    else:
        candidates = [os.path.join(d or ".", name) for d in env.get("PATH", os.defpath).split(os.pathsep)]
    denied = None
    for path in candidates:
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                return path
            denied = path
    if denied is not None or "/" in name and os.path.exists(name):
        raise PermissionError(13, "Permission denied", denied or name)
    raise FileNotFoundError(2, "No such file or directory", name)


def _exec_child(req: dict[str, Any], out_fd: int | None, err_fd: int | None, fail_fd: int) -> None:
    """In the forked child: become a session leader and exec the job's command. An output
    file the monitor could not open without waiting (its fd None) is opened here once the
    command is found and `fail_fd` closed (the monitor then reports the start), so that only
    this process waits for the file's reader."""
    argv = req["argv"]
    told = fail_fd  # where a failure is told: the monitor, or the job's error file once started
    try:
        os.setsid()
        # Python ignores SIGPIPE and may have other dispositions; the job gets defaults.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.chdir(req["cwd"])
        except OSError:
            os.write(fail_fd, f"working_dir {req['cwd']} is not a directory".encode())
            os._exit(127)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        if out_fd is not None and err_fd is not None:
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            os.execvpe(argv[0], argv, req["env"])
        program = _find_program(argv[0], req["env"])
        os.close(fail_fd)
        told = 2
        _open_late(req, out_fd, err_fd)
        os.execve(program, argv, req["env"])
    except FileNotFoundError:
        _say(told, f"command not found: {argv[0]}")
    except PermissionError as exc:
        _say(told, f"permission denied: {exc.filename or argv[0]}")
    except BaseException as exc:  # noqa: BLE001 - anything at all must reach the daemon
        _say(told, f"cannot start {argv[0]}: {exc}")
    os._exit(127)


def _open_late(req: dict[str, Any], out_fd: int | None, err_fd: int | None) -> None:
    """In the child, its start reported: open the outputs the monitor left (waiting for a
    FIFO's reader here is the job's own wait). One that cannot be opened after all ends the
    process with status 2, the reason in the error file if that one is open."""
    if err_fd is not None:
        os.dup2(err_fd, 2)
    try:
        os.dup2(out_fd if out_fd is not None else os.open(req["out"], _OUTPUT_FLAGS, 0o644), 1)
        if err_fd is None:
            os.dup2(1 if req["err"] == req["out"] else os.open(req["err"], _OUTPUT_FLAGS, 0o644), 2)
    except OSError as exc:
        _say(2, f"cannot open output file {exc.filename}: {exc.strerror}")
        os._exit(2)


def _say(fd: int, text: str) -> None:
    """Why the command did not start: to the monitor before the start was reported (fd is
    its pipe), to the job's error file after (fd 2)."""
    try:
        os.write(fd, (text if fd != 2 else f"elastic: {text}\n").encode())
    except OSError:
        pass


def _monitor(req: dict[str, Any], report_fd: int) -> None:
    """In the forked monitor: start the job, say its PGID, wait, record its exit status."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # from here on nothing ties us to the SSH channel
    status_dir, token = req["status_dir"], req["token"]
    run_path, st_path = os.path.join(status_dir, token + ".run"), os.path.join(status_dir, token + ".st")
    try:
        os.makedirs(status_dir, mode=0o700, exist_ok=True)
        run_fd = _reserve(run_path)
        try:
            st_fd = _reserve(st_path)
        except OSError:
            os.close(run_fd)
            _unlink_quietly(run_path + ".tmp")
            raise
    except OSError as exc:
        # Said before anything starts: a job started here could be neither tracked nor ended.
        _report(report_fd, f"error cannot record the job's processes in {status_dir} on {os.uname().nodename}: "
                           f"{exc.strerror}")
        return
    # The same files where they are opened, here or in the child (after its chdir).
    req = {**req, "out": os.path.abspath(req["out"]), "err": os.path.abspath(req["err"])}
    try:
        out_fd = _open_output(req["out"])
        err_fd = out_fd if req["err"] == req["out"] else _open_output(req["err"])
    except OSError as exc:
        for fd, path in ((run_fd, run_path), (st_fd, st_path)):
            os.close(fd)
            _unlink_quietly(path + ".tmp")
        _report(report_fd, f"error cannot open output file {exc.filename}: {exc.strerror}")
        return
    fail_r, fail_w = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        os.close(fail_r)
        os.close(report_fd)
        os.close(run_fd)
        os.close(st_fd)
        _exec_child(req, out_fd, err_fd, fail_w)
    os.close(fail_w)
    failure = b""
    while True:
        chunk = os.read(fail_r, 4096)
        if not chunk:
            break
        failure += chunk
    os.close(fail_r)
    if failure:
        os.waitpid(child, 0)
        for fd, path in ((run_fd, run_path), (st_fd, st_path)):
            os.close(fd)
            _unlink_quietly(path + ".tmp")
        _report(report_fd, "error " + failure.decode("utf-8", "replace"))
        return
    try:
        _commit(run_fd, run_path, f"{child} {os.getpid()}\n")
    except OSError as exc:
        # Unrecorded, the job could not be found again: it does not run on untracked.
        try:
            os.killpg(child, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(child, 0)
        os.close(st_fd)
        _unlink_quietly(st_path + ".tmp")
        _report(report_fd, f"error cannot record the job's process in {status_dir}: {exc.strerror}")
        return
    _report(report_fd, f"ok {child}")
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        code, signum = 0, os.WTERMSIG(status)
    else:
        code, signum = os.WEXITSTATUS(status), 0
    _commit(st_fd, st_path, f"{code} {signum}\n")


def spawn() -> None:
    req = json.loads(sys.stdin.buffer.read())
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(report_r)
        try:
            _monitor(req, report_w)
        except BaseException as exc:  # noqa: BLE001
            try:
                _report(report_w, f"error monitor failed: {exc}")
            except OSError:
                pass
        os._exit(0)
    os.close(report_w)
    answer = b""
    while True:
        chunk = os.read(report_r, 4096)
        if not chunk:
            break
        answer += chunk
    os.waitpid(pid, os.WNOHANG)
    sys.stdout.write((answer.decode("utf-8", "replace") or "error the monitor died before the job started") + "\n")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (OSError, IndexError):
        return False


def _members(pgids: set[int]) -> list[int]:
    """Live (non-zombie) processes of these process groups, from /proc."""
    found: list[int] = []
    if not pgids:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command name: state, ppid, pgrp.
        if fields[0] != b"Z" and int(fields[2]) in pgids:
            found.append(int(name))
    return found


def _signal_groups(pgids: set[int], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _sleep_while_members(pgids: set[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    delay = 0.005
    while _members(pgids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(0.05, delay * 2)
    return True


def _strays(tag: str | None, members: Collection[int]) -> set[int]:
    """The job's live processes on this node outside its process groups (whose live
    `members` are given: one /proc scan is enough), by their tag."""
    if tag is None:
        return set()
    prefix, job, host = tag.rsplit("/", 2)
    found = _tagged(f"ELASTIC_TAG={prefix}/".encode(), f"/{host}".encode(), set())
    return {pid for pid, j in found.items() if j == job and pid not in members}


def end(grace: str, wait: str, status_dir: str, items: list[str]) -> None:
    tokens = {}
    tag: str | None = None
    passes_on = False
    for item in items:
        if item.startswith("tag="):
            tag = item[len("tag="):]
            continue
        if item == "passes-on":
            passes_on = True
            continue
        token, _, pgid = item.partition(":")
        tokens[token] = int(pgid)
    pgids = set(tokens.values())
    gone = _sleep_while_members(pgids, float(grace))
    strays = _strays(tag, _members(pgids))
    if not gone or strays:
        # One SIGTERM each: the groups as one, what left them one by one.
        if not gone:
            _signal_groups(pgids, signal.SIGTERM)
        if not passes_on:
            _signal_pids(strays, signal.SIGTERM)
        deadline = time.monotonic() + float(wait)
        # The environments are read only once the groups are empty.
        while (_members(pgids) or _strays(tag, ())) and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(100):
            members = _members(pgids)
            strays = _strays(tag, members)
            if not members and not strays:
                break
            _signal_groups(pgids, signal.SIGKILL)
            _signal_pids(strays, signal.SIGKILL)
            time.sleep(0.02)
    members = _members(pgids)
    left = members + sorted(_strays(tag, members))
    lines = []
    for token in tokens:
        st = os.path.join(status_dir, token + ".st")
        run = os.path.join(status_dir, token + ".run")
        status = "? ?"
        # The monitor writes the status right after its child is reaped: wait while it
        # lives (a loaded node may take a moment), then look once more.
        deadline = time.monotonic() + (5.0 if not left else 0.0)
        while True:
            try:
                with open(st) as f:
                    status = f.read().strip() or "? ?"
                break
            except FileNotFoundError:
                if time.monotonic() >= deadline or not os.path.exists(run):
                    break
                if not _monitor_alive(run):
                    deadline = 0.0  # one more look: it may have written and exited
                time.sleep(0.01)
        lines.append(f"st {token} {status}")
        if not left:
            for path in (st, run):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
    lines.append("left " + " ".join(map(str, left)) if left else "gone")
    sys.stdout.write("\n".join(lines) + "\n")


def _monitor_alive(run_path: str) -> bool:
    try:
        with open(run_path) as f:
            return _alive(int(f.read().split()[1]))
    except (OSError, ValueError, IndexError):
        return False


def watch(status_dir: str, heartbeat_text: str) -> None:
    heartbeat = float(heartbeat_text)
    os.makedirs(status_dir, mode=0o700, exist_ok=True)
    seen = set()
    lost = set()
    last_hb = 0.0
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable and not os.read(0, 4096):
            return  # the daemon closed the channel
        try:
            names = set(os.listdir(status_dir))
        except FileNotFoundError:
            names = set()
        lines = []
        for name in sorted(names):
            if name.endswith(".st") and name not in seen:
                try:
                    with open(os.path.join(status_dir, name)) as f:
                        text = f.read().strip()
                except FileNotFoundError:
                    continue
                seen.add(name)
                lines.append(f"exit {name[:-3]} {text or '? ?'}")
        seen &= names
        now = time.monotonic()
        if now - last_hb >= heartbeat:
            last_hb = now
            lines.append("hb")
            # A monitor killed by hand (or by the OOM killer) leaves no status: say so.
            for name in names:
                token = name[:-4]
                if (
                    name.endswith(".run")
                    and token + ".st" not in names
                    and token not in lost
                    and not _monitor_alive(os.path.join(status_dir, name))
                    and not os.path.exists(os.path.join(status_dir, token + ".st"))
                ):
                    lost.add(token)
                    lines.append(f"exit {token} ? ?")
        if lines:
            os.write(1, ("\n".join(lines) + "\n").encode())


def procs(status_dir: str, jobs: list[str]) -> None:
    prefixes = tuple(f"{j}." for j in jobs)
    try:
        names = [n for n in os.listdir(status_dir) if n.endswith(".run") and n.startswith(prefixes)]
    except FileNotFoundError:
        names = []
    found = []
    for name in names:
        token = name[:-4]
        run = os.path.join(status_dir, name)
        try:
            with open(run) as f:
                pgid = int(f.read().split()[0])
            mtime = os.stat(run).st_mtime
        except (OSError, ValueError, IndexError):
            continue
        status = "- -"
        try:
            with open(os.path.join(status_dir, token + ".st")) as f:
                status = f.read().strip() or "? ?"
        except FileNotFoundError:
            if not _monitor_alive(run):
                # It may have written its record and exited just now: look once more.
                try:
                    with open(os.path.join(status_dir, token + ".st")) as f:
                        status = f.read().strip() or "? ?"
                except FileNotFoundError:
                    status = "? ?"
        found.append((mtime, token, pgid, status))
    lines = [f"proc {token} {pgid} {status}" for _, token, pgid, status in sorted(found)]
    lines.append("done")
    sys.stdout.write("\n".join(lines) + "\n")


def _drop_records(status_dir: str, keep: Collection[str], wait: float) -> int:
    """Remove the records in STATUS_DIR of the jobs not in KEEP whose monitors are done (the
    status written, or the monitor gone): the daemon settled those jobs and never reads them
    again. A record whose monitor still waits for its process is kept -- that exit status
    may still be wanted -- after waiting up to WAIT s for it. How many tokens were kept."""
    deadline = time.monotonic() + wait
    while True:
        try:
            names = os.listdir(status_dir)
        except FileNotFoundError:
            return 0
        tokens: dict[str, list[str]] = {}
        for name in names:
            parts = name.split(".")
            if len(parts) >= 3 and parts[0] not in keep:
                tokens.setdefault(f"{parts[0]}.{parts[1]}", []).append(name)
        busy = 0
        for token, files in tokens.items():
            if not _record_done(status_dir, token):
                busy += 1
                continue
            for name in files:
                _unlink_quietly(os.path.join(status_dir, name))
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(0.05)


def _record_done(status_dir: str, token: str) -> bool:
    """Whether nothing more will be written for TOKEN: its status is there, or its monitor is
    gone. A record still being set up (only its .tmp files: a monitor starting its process)
    counts as done only once it is old enough to be a monitor that died there."""
    base = os.path.join(status_dir, token)
    if os.path.exists(base + ".st"):
        return True
    if os.path.exists(base + ".run"):
        return not _monitor_alive(base + ".run")
    for tmp in (base + ".run.tmp", base + ".st.tmp"):
        try:
            if time.time() - os.stat(tmp).st_mtime < 60:
                return False
        except OSError:
            pass
    return True


def cleanup(status_dir: str, keep: list[str]) -> None:
    _drop_records(status_dir, set(keep), 0.0)
    try:
        os.rmdir(status_dir)
        os.rmdir(os.path.dirname(status_dir))  # the run's directory, once every node left it
    except OSError:
        pass
    left = os.listdir(status_dir) if os.path.isdir(status_dir) else []
    sys.stdout.write(f"kept {len(left)}\n" if left else "gone\n")


def _tagged(prefix: bytes, suffix: bytes, keep: set[str]) -> dict[int, str]:
    """pid -> job of the live processes whose environment has PREFIX JOB SUFFIX."""
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(prefix) and item.endswith(suffix):
                job = item[len(prefix):len(item) - len(suffix)].decode(errors="replace")
                if job.isdigit() and job not in keep and _alive(int(name)):
                    found[int(name)] = job
                break
    return found


def _signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _mpi_owned(prefix: bytes, keep: set[str]) -> dict[int, str]:
    """pid -> job of the live processes in this node's network namespace whose environment
    has PREFIX JOB: ranks carry no host in their tag, and on a machine whose nodes share
    one process table (deploy/vcluster.sh) the namespace is the node."""
    try:
        me = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return {}
    found = {}
    for pid, job in _tagged(prefix, b"", keep).items():
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == me:
                found[pid] = job
        except OSError:
            continue
    return found


def sweep(tag: str, host: str, wait: str, items: list[str]) -> None:
    prefix = f"ELASTIC_TAG={tag}/".encode()
    suffix = f"/{host}".encode()
    mpi_prefix = f"ELASTIC_MPI_OWNER={tag}/".encode()
    status_dir = next((i[len("dir="):] for i in items if i.startswith("dir=")), None)
    kept = {i for i in items if not i.startswith(("dir=", "mpi="))}
    kept_mpi = kept | {i[len("mpi="):] for i in items if i.startswith("mpi=")}

    def tagged() -> dict[int, str]:
        return {**_mpi_owned(mpi_prefix, kept_mpi), **_tagged(prefix, suffix, kept)}

    first = tagged()
    if first:
        _signal_pids(first, signal.SIGTERM)
        deadline = time.monotonic() + float(wait)
        while tagged() and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(100):
            left = tagged()
            if not left:
                break
            _signal_pids(left, signal.SIGKILL)
            time.sleep(0.02)
    counts: dict[str, int] = {}
    for job in first.values():
        counts[job] = counts.get(job, 0) + 1
    lines = [f"ended {job} {n}" for job, n in sorted(counts.items())]
    left = tagged()
    if status_dir is not None:
        # The monitors of the processes just ended write their records a moment later.
        _drop_records(status_dir, kept, 2.0 if first else 0.0)
    lines.append("left " + " ".join(map(str, sorted(left))) if left else "gone")
    sys.stdout.write("\n".join(lines) + "\n")


def main(argv: list[str]) -> None:
    role, args = argv[0], argv[1:]
    if role == "spawn":
        spawn()
    elif role == "watch":
        watch(*args)
    elif role == "end":
        end(args[0], args[1], args[2], args[3:])
    elif role == "procs":
        procs(args[0], args[1:])
    elif role == "cleanup":
        cleanup(args[0], args[1:])
    elif role == "sweep":
        sweep(args[0], args[1], args[2], args[3:])
    else:
        sys.stderr.write(f"remote_agent: unknown role {role!r}\n")
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
