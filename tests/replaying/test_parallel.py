"""Replay split across processes by dependency: the same receipt, the same first error.

Every test here runs the real command line in a fresh interpreter (which forks its
replay processes), except the one that makes this process start them with ``spawn``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_stream import NAMES, OUTCOMES

from process_helpers import read_then_close
from toolbreaker._replaying import _parallel, replay_trace
from toolbreaker.cli import main
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._files import iter_line_blocks
from toolbreaker.errors import TraceError

pytestmark = pytest.mark.slow

SHADOW = 'mode = "shadow"\nfailure_threshold = 2\n'
# A boundary sheet: rows of their own (one in shadow mode) among the defaults' breakers.
SHEET = (
    "[defaults]\ntimeout_ms = 2000\nfailure_threshold = 3\n\n"
    "[tool-3.default]\nfailure_threshold = 1\ncooldown_ms = 100\n\n"
    '[tool-5.default]\nmode = "shadow"\nfailure_threshold = 1\n\n'
    "[search.default]\nfailure_threshold = 2\nprobe_limit = 2\n"
)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "toolbreaker", *args],
        capture_output=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def owned_by(share: int, jobs: int, prefix: str) -> str:
    """A dependency name the replay process ``share`` of ``jobs`` owns."""
    owners = _parallel._Owners(share, jobs)
    return next(f"{prefix}{i}" for i in range(1000) if not owners[f"{prefix}{i}"])


def write_lines(path: Path, events: list[dict | str]) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write((event if isinstance(event, str) else json.dumps(event)) + "\n")
    return path


def mixed_trace(path: Path) -> Path:
    """Plain lines, other shapes, escapes, spaces in ids, a lone dependency."""
    rng = random.Random(7)
    deps = [*NAMES, *(f"tool-{i}" for i in range(40))]
    at = dict.fromkeys(deps, 0)
    unsettled: dict[str, list[str]] = {dep: [] for dep in deps}
    events: list[dict | str] = []
    for i in range(6000):
        dep = rng.choice(deps)
        at[dep] += rng.choice([0, 1, 5, 50, 5_000, 30_000])
        calls = unsettled[dep]
        if calls and rng.random() < 0.5:
            kind = rng.choice(OUTCOMES)
            event = {"at": at[dep], "dependency": dep, "type": kind}
            event["call"] = calls.pop(rng.randrange(len(calls)))
            if kind == "failure" and rng.random() < 0.2:
                event["retry_after_ms"] = rng.randrange(0, 60_000)
        else:
            call = f"c {i}" if rng.random() < 0.05 else f"c{i}"
            calls.append(call)
            event = {"at": at[dep], "dependency": dep, "type": "request", "call": call}
        events.append(event)
        if i % 97 == 0:
            events.append("")  # blank lines are skipped by every process
    events.append({"at": 10**9, "dependency": "alone", "type": "request", "call": "one call"})
    # Sorted keys and spaces after separators, as TraceRecorder writes them.
    events.append('{"at": 1, "call": "x", "dependency": "sorted-keys", "type": "request"}')
    events.append({"at": 2, "dependency": "sorted-keys", "type": "failure", "call": "x"})
    return write_lines(path, events)


@pytest.mark.parametrize("policy", [None, SHADOW, SHEET], ids=["plain", "shadow", "sheet"])
def test_the_receipt_is_the_same_in_any_number_of_processes(tmp_path, policy):
    trace = mixed_trace(tmp_path / "t.jsonl")
    args = [str(trace)]
    if policy:
        (tmp_path / "p.toml").write_text(policy)
        args += ["--policy", str(tmp_path / "p.toml")]
    initial = {
        NAMES[0]: {"state": "open", "generation": 3, "opens": 2},
        "tool-7": {"state": "bogus"},  # corrupt: loads open and flagged
        "never-in-the-trace": {"state": "closed"},
    }
    (tmp_path / "s.json").write_text(json.dumps(initial))
    args += ["--initial-state", str(tmp_path / "s.json")]
    one = run("replay", *args, "--jobs", "1")
    assert one.returncode == 0, one.stderr
    receipt = json.loads(one.stdout)
    assert len(receipt["dependencies"]) == len(NAMES) + 40 + 3
    assert receipt["dependencies"]["tool-7"]["recovered_from_corruption"] is True
    if policy is SHEET:
        rows = {name for name, dep in receipt["dependencies"].items() if "policy" in dep}
        assert rows == {"tool-3", "tool-5", "search"}
    # --summary counts without keeping a record: the receipt's counts, all the same.
    summary = json.loads(run("replay", *args, "--jobs", "1", "--summary").stdout)
    for name, dep in receipt["dependencies"].items():
        counted = summary["dependencies"][name]
        assert counted["transitions"] == len(dep["transitions"])
        for key in ("remote_attempts", "local_rejections", "opens"):
            assert counted[key] == dep[key], (name, key)
        assert counted["final_state"] == dep["final_state"]["state"]
    for jobs in ("2", "3"):
        split = run("replay", *args, "--jobs", jobs)
        assert split.returncode == 0, split.stderr
        assert split.stdout == one.stdout
        counted = json.loads(run("replay", *args, "--jobs", jobs, "--summary").stdout)
        assert counted == summary
    (tmp_path / "r.json").write_bytes(one.stdout)
    verified = run("verify", str(tmp_path / "r.json"), *args, "--jobs", "2")
    assert verified.returncode == 0, verified.stdout
    assert verified.stdout.startswith(b"verified: ")


def test_a_share_with_no_dependency_still_answers(tmp_path):
    """One dependency, three processes: two of them replay nothing."""
    dep = owned_by(1, 3, "only-")
    trace = write_lines(
        tmp_path / "t.jsonl",
        [{"at": i, "dependency": dep, "type": "request", "call": f"c{i}"} for i in range(50)],
    )
    one, split = run("replay", str(trace), "--jobs", "1"), run("replay", str(trace), "--jobs", "3")
    assert split.returncode == 0, split.stderr
    assert split.stdout == one.stdout


def errors(tmp_path: Path, events: list[dict | str]) -> list[bytes]:
    trace = write_lines(tmp_path / "bad.jsonl", events)
    answers = [run("replay", str(trace), "--jobs", jobs) for jobs in ("1", "2", "3")]
    assert {answer.returncode for answer in answers} == {2}
    assert {answer.stdout for answer in answers} == {b""}
    return [answer.stderr for answer in answers]


def request(dep: str, at: int, call: str) -> dict:
    return {"at": at, "dependency": dep, "type": "request", "call": call}


@pytest.mark.parametrize("first", [0, 1])
def test_the_first_error_is_the_one_a_single_process_reports(tmp_path, first):
    """Each process stops at its own first error; the earliest line wins, as in one."""
    early, late = owned_by(first, 2, "early-"), owned_by(1 - first, 2, "late-")
    events: list[dict | str] = [request(early, 5, "a"), request(late, 5, "b")]
    events += [request(late, 6, "b2"), request(early, 4, "c")]  # line 4: time went backwards
    events += [request(late, 7, "b")]  # line 5: a duplicate id, after the first error
    stderr = errors(tmp_path, events)
    assert len(set(stderr)) == 1, stderr
    assert b"bad.jsonl:4: time went backwards" in stderr[0]


def test_a_line_no_process_can_place_fails_in_each(tmp_path):
    dep = owned_by(0, 2, "d-")
    events: list[dict | str] = [request(dep, 1, "a"), "{not json", request(dep, 0, "b")]
    stderr = errors(tmp_path, events)
    assert len(set(stderr)) == 1, stderr
    assert stderr[0].startswith(b"error: ")
    assert b"bad.jsonl:2: " in stderr[0]


def test_an_invalid_plain_line_is_reported_by_its_dependency(tmp_path):
    """A time past the limit in a plain line: the owner's replay says what is wrong."""
    dep, other = owned_by(0, 2, "x-"), owned_by(1, 2, "y-")
    events: list[dict | str] = [request(other, 1, "a"), request(dep, int("9" * 16), "b")]
    stderr = errors(tmp_path, events)
    assert len(set(stderr)) == 1, stderr
    assert b"bad.jsonl:2: " in stderr[0]


def test_a_big_trace_is_split_by_default_and_leaves_no_files(tmp_path, monkeypatch):
    trace = mixed_trace(tmp_path / "t.jsonl")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"TMPDIR": str(scratch)}
    one = run("replay", str(trace), "--jobs", "1", env=env)
    # The default splits a trace of PARALLEL_BYTES or more; this one is smaller, so make
    # the threshold smaller in the child and count the processes it starts.
    probe = (
        "import sys, multiprocessing\n"
        "from toolbreaker.cli import main\n"
        "from toolbreaker._replaying import _parallel\n"
        "_parallel.PARALLEL_BYTES = 1024\n"
        "started = []\n"
        "real = _parallel._feed_in_processes\n"
        "def counted(driver, path, size, jobs, **options):\n"
        "    started.append(jobs)\n"
        "    real(driver, path, size, jobs, **options)\n"
        "_parallel._feed_in_processes = counted\n"
        "code = main(sys.argv[1:])\n"
        "sys.stderr.write(f'jobs {started}')\n"
        "sys.exit(code)\n"
    )
    split = subprocess.run(
        [sys.executable, "-c", probe, "replay", str(trace)],
        capture_output=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
    )
    assert split.returncode == 0, split.stderr
    assert split.stdout == one.stdout
    cpus = len(os.sched_getaffinity(0))
    assert split.stderr == (f"jobs [{min(cpus, 4)}]" if cpus > 1 else "jobs []").encode()
    failed = run("replay", str(write_lines(tmp_path / "b.jsonl", ["[]"])), "--jobs", "2", env=env)
    assert failed.returncode == 2
    assert list(scratch.iterdir()) == []


def test_a_stream_is_replayed_in_one_process(tmp_path):
    """A pipe cannot be read twice: --jobs is ignored for anything but a regular file."""
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    lines = "".join(json.dumps(request("s", i, f"c{i}")) + "\n" for i in range(100))

    def feed() -> None:
        with fifo.open("w") as out:
            out.write(lines)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        answer = run("replay", str(fifo), "--jobs", "2")
    finally:
        writer.join(timeout=60)
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["dependencies"]["s"]["remote_attempts"] == 100


def split_with(patch: str, trace: Path) -> str:
    """Replay ``trace`` in two processes after running ``patch`` (which forked processes
    inherit); the one error line it ends with (exit 2, nothing on stdout)."""
    script = (
        "import os, sys\nfrom toolbreaker.cli import main\n"
        f"from toolbreaker._replaying import _parallel, _stream\n{patch}\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    answer = subprocess.run(
        [sys.executable, "-c", script, "replay", str(trace), "--jobs", "2"],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert answer.returncode == 2
    assert answer.stdout == b""
    return answer.stderr.decode()


def test_a_process_that_dies_is_one_clear_error(tmp_path):
    trace = mixed_trace(tmp_path / "t.jsonl")
    err = split_with("_parallel._replay_share = lambda *args: os._exit(3)", trace)
    assert err == f"error: {trace}: replay process 0 ended without an answer (exit code 3)\n"


def test_spawned_processes_give_the_same_receipt(tmp_path, capsysbinary):
    """A process running other threads is not forked: its replay processes are spawned."""
    trace = mixed_trace(tmp_path / "t.jsonl")
    assert main(["replay", str(trace), "--jobs", "1"]) == 0
    one = capsysbinary.readouterr().out
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert main(["replay", str(trace), "--jobs", "2"]) == 0
    finally:
        stop.set()
        other.join()
    assert capsysbinary.readouterr().out == one


@pytest.mark.parametrize("value", ["0", "-1", "many", "65"])
def test_jobs_must_be_a_sane_number(value, capsys):
    """A bad --jobs is one line naming it, exit 2."""
    assert main(["replay", "whatever.jsonl", "--jobs", value]) == 2
    err = capsys.readouterr().err
    assert "--jobs: must be a whole number from 1 to 64" in err
    assert err.count("\n") == 1


def test_a_replay_reads_the_bytes_the_file_had_when_it_began(tmp_path):
    """Each process reads the size measured at the start; a file that shrank is an error."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"a": 1}\n{"b": 2}\n{"c": 3}\n')
    blocks = list(iter_line_blocks(trace, TraceError, size=18))
    assert [line for _, lines in blocks for line in lines] == ['{"a": 1}', '{"b": 2}']
    with pytest.raises(TraceError) as error:
        list(iter_line_blocks(trace, TraceError, size=100))
    assert error.value.located() == f"{trace}:4: the file shrank while it was read"


def test_a_process_stops_reading_past_an_earlier_error(tmp_path):
    """An error one process found ends the others' reading at their next block."""
    trace = write_lines(tmp_path / "t.jsonl", [request("s", i, f"c{i}") for i in range(10)])
    size = trace.stat().st_size
    receive, send = multiprocessing.Pipe(duplex=False)
    first_error = multiprocessing.Value("q", 0)  # an error before the first line
    share = _parallel._ShareOf(str(trace), size, 0, 1, True, first_error)
    _parallel._replay_share(send, Policy(), {}, share)
    assert receive.recv() == _parallel._Share({}, {}, stopped=True)
    first_error.value = _parallel._NO_ERROR
    bad = write_lines(tmp_path / "bad.jsonl", [request("s", 5, "a"), request("s", 4, "b")])
    share = share._replace(path=str(bad), size=bad.stat().st_size)
    receive, send = multiprocessing.Pipe(duplex=False)
    _parallel._replay_share(send, Policy(), {}, share)
    answer = receive.recv()
    assert answer.error[0] == 2
    assert answer.error[1].startswith("time went backwards")
    assert first_error.value == 2  # the others stop past it


def test_a_closed_pipe_or_a_full_disk_ends_every_process(tmp_path):
    """Output that cannot be written ends the replay and its processes, without a traceback."""
    trace = mixed_trace(tmp_path / "t.jsonl")
    command = [sys.executable, "-m", "toolbreaker", "replay", str(trace), "--jobs", "2"]
    code, err = read_then_close(command)
    assert err == ""
    assert code in (0, 141)
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            answer = subprocess.run(
                command, stdout=full, stderr=subprocess.PIPE, timeout=60, check=False
            )
        assert answer.returncode == 2
        assert answer.stderr.startswith(b"error: cannot write output")
        assert answer.stderr.count(b"\n") == 1


def test_closing_the_replay_ends_its_processes_at_once(tmp_path):
    """Closed before the receipt is read, the processes see a broken pipe and end.

    A forked process used to keep a copy of the read ends, so its pipe never broke: it
    waited, blocked, until it was terminated.
    """
    trace = mixed_trace(tmp_path / "t.jsonl")
    script = (
        "import sys\n"
        "from toolbreaker._replaying import replay_trace\n"
        "from toolbreaker.core._breaker.policy import Policy\n"
        "driver = replay_trace(Policy(), None, sys.argv[1], jobs=2)\n"
        "workers = [worker for split in driver._others for worker in split.workers]\n"
        "driver.close()\n"
        "print([worker.exitcode for worker in workers])\n"
    )
    answer = subprocess.run(
        [sys.executable, "-c", script, str(trace)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == "[0, 0]\n"


def test_a_process_that_fails_is_one_clear_error(tmp_path):
    """Anything but a trace error in a replay process (a full disk) is one error line."""
    trace = mixed_trace(tmp_path / "t.jsonl")
    patch = (
        "def full(self):\n"
        "    raise OSError(28, 'No space left on device')\n"
        "_stream.StreamingReplay.share = full"
    )
    assert split_with(patch, trace) == (
        f"error: {trace}: replay process 0 failed: OSError: [Errno 28] No space left on device\n"
    )


def test_a_summary_writes_no_temporary_file(tmp_path):
    trace = mixed_trace(tmp_path / "t.jsonl")
    with replay_trace(Policy(), None, str(trace), jobs=1, transitions=False) as driver:
        assert driver.summary()["dependencies"]
        assert driver._spill._file is None
