"""The session in a process of its own, behind the same ``SessionSurface``.

Under the dashboard the session used to run on a thread of the UI's process, and
the two shared one interpreter lock: at 2,000 deltas/s the session's HTTP and
SSE work (about 185 µs a delta here) and the dashboard's frames took turns, the
screen fell a second behind the stream (benchmark 3b) and a demo turn took
1.25× its headless time (benchmark 8). In a child process the session has a
core of its own and the UI process only draws.

The child (``python -m app.wiring.session_child REQUEST``) builds the session exactly
as ``tidegauge`` does and speaks JSON lines, codex's app-server in small:

- child → parent, stdout: first one control line, ``{"type": "@ready", ...the
  snapshot and its seq}`` or ``{"type": "@failed", "message": one line}``; then
  every event after that seq as its stream-json object, its envelope's ``seq`` and
  ``command_id`` beside its fields (``EventEnvelope.to_json``). Deltas in a row are merged into one event (one line per
  ``DELTA_WINDOW`` of a stream, not one per token) carrying the last one's seq,
  so seqs seen by the parent rise but may skip.
- parent → child, stdin: one command per line, ``{"command": "UserInput",
  "fields": {...}, "id": 7}``: the parent numbers the commands, so the id its
  ``submit`` returned is the ``command_id`` on the events they cause. End of
  input (the dashboard closed, or died) is ``Shutdown(now=True)``.

The child ignores SIGINT and runs in a session of its own: a terminal's ctrl+c
belongs to the dashboard, which decides what it means.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from app.kernel import commands as cmd
from app.kernel import events as ev
from app.kernel.envelope import EventEnvelope, envelope_from_json, envelope_from_json_line
from app.kernel.errors import SetupError
from app.kernel.events import ContextEvent, SessionInfoEvent, StateEvent, event_adapter, ErrorEvent
from app.kernel.session_facts import SessionFacts
from app.kernel.protocol import DELTAS, EventLog, Listener, Listeners, SessionSnapshot, merge_deltas
from app.system.proctree import wait_for_exit

if TYPE_CHECKING:
    from app.kernel.events import Event, SessionInfoEvent

DELTA_WINDOW = 0.008  # seconds a streamed delta may wait in the child to share a line with the next ones
# The child's entry point: it builds a session from settings, which is wiring's job
# (app/wiring/session_child.py); this module is the protocol and the parent's side.
CHILD_MODULE = "app.wiring.session_child"
_COMMANDS: dict[str, type] = {kind.__name__: kind for kind in cmd.Command.__args__}  # type: ignore[attr-defined]


def encode_command(command: cmd.Command, command_id: int | None = None) -> bytes:
    data: dict[str, Any] = {"command": type(command).__name__, "fields": dataclasses.asdict(command)}
    if command_id is not None:
        data["id"] = command_id
    return (json.dumps(data) + "\n").encode()


def decode_command_line(line: bytes) -> tuple[int | None, cmd.Command]:
    """One command line: its id (None if it has none) and the command; ValueError naming what was wrong."""
    try:
        data = json.loads(line)
        kind = _COMMANDS[data["command"]]
        command: cmd.Command = kind(**data.get("fields", {}))
        command_id = data.get("id")
        # Up to 2**53: the ids go out again on stream-json lines, which a JavaScript reader parses.
        if command_id is not None and (type(command_id) is not int or not 0 < command_id <= 2**53):
            raise ValueError(f"id {command_id!r} is not a positive integer (at most 2**53)")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a command line ({type(error).__name__}: {error}): {line[:80]!r}") from None
    return command_id, command


def decode_command(line: bytes) -> cmd.Command:
    """One command line's command; ValueError naming what was wrong."""
    return decode_command_line(line)[1]


# ---------------------------------------------------------------------------------------- the child


class EventWriter:
    """A session listener that writes events as lines on a file descriptor, from its own thread.

    The listener only queues (it runs on the session's loop, which must not wait on
    a pipe); the thread serializes, merges deltas in a row and writes.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: deque[EventEnvelope] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name="tidegauge-event-writer", daemon=True)

    def open(self, first_line: bytes) -> None:
        """Write the ``@ready`` line, then the events queued since the writer attached and
        every one after: the snapshot on that line is the one the events follow."""
        self._write(first_line)
        self._thread.start()

    def __call__(self, envelope: EventEnvelope) -> None:
        with self._ready:
            self._queue.append(envelope)
            self._ready.notify()

    def close(self) -> None:
        """Write what is queued, then stop."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _main(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                batch = list(self._queue)
                self._queue.clear()
                closed = self._closed
            if batch:
                self._write(merged_lines(batch))
            if closed:
                return
            if batch and isinstance(batch[-1].event, DELTAS):
                time.sleep(DELTA_WINDOW)  # a stream is on: let its next deltas join one line

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except BrokenPipeError:  # the dashboard is gone; the session stops on end of input
                return
            view = view[written:]


def merged_lines(batch: list[EventEnvelope]) -> bytes:
    """The events as JSON lines, deltas of one kind in a row merged into one event (as the
    session's log keeps them: ``app.kernel.protocol.merge_deltas``)."""
    return b"".join((json.dumps(envelope.to_json()).encode() if isinstance(envelope.event, DELTAS)
                     else envelope.to_json_bytes()) + b"\n" for envelope in merge_deltas(batch))


def ready_line(snapshot: SessionSnapshot) -> bytes:
    """The child's first line on a session that started: ``@ready`` with its snapshot and seq."""
    return json.dumps({
        "type": "@ready", "info": snapshot.info.model_dump(mode="json"),
        "context": snapshot.context.model_dump(mode="json"), "state": snapshot.state.model_dump(mode="json"),
        "restored": [event.model_dump(mode="json") for event in snapshot.restored],
        "busy": snapshot.busy, "queued": snapshot.queued, "seq": snapshot.seq,
        "events": [envelope.to_json() for envelope in snapshot.events],
        "standing": [envelope.to_json() for envelope in snapshot.standing]}).encode() + b"\n"


def failed_line(message: str) -> bytes:
    """The child's first and only line when its session could not be built: ``@failed``, one line."""
    return (json.dumps({"type": "@failed", "message": message}) + "\n").encode()


# ---------------------------------------------------------------------------------------- the parent


def _end_what_it_left() -> None:
    """The session process has ended: what it started and left behind (killed with -9, its
    tools and servers were handed to us, a subreaper) ends too. In tidegauge's own process every
    descendant is the session's (``proctree.claim_every_descendant``); elsewhere, only run_bash's."""
    proctree = sys.modules.get("app.system.proctree")
    if proctree is not None:
        proctree.kill_all_descendants()


class SessionProcess:
    """A ``SessionSurface`` whose session runs in a child process.

    ``snapshot()`` is kept from the ``@ready`` line and the events since; listeners
    are called on the reader thread, in order, as the in-process session calls
    them on its own thread.
    """

    def __init__(self, overrides: dict[str, Any] | None = None, *, resume: str | None = None,
                 continue_latest: bool = False, cwd: Path | None = None) -> None:
        self._request = {"overrides": {k: (str(v) if isinstance(v, Path) else v) for k, v in (overrides or {}).items()},
                         "resume": resume, "continue_latest": continue_latest}
        self._cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()  # the mirror and the listener list change together
        self._listeners = Listeners(self._lock)
        self._write_lock = threading.Lock()
        self._ids = 0
        self._snapshot: SessionSnapshot | None = None
        # The child's session as its events say it now (info, context, state, queue): the reducer
        # the dashboard's view model builds on, so the two cannot disagree on what "busy" is.
        self._facts = SessionFacts()
        self._log = EventLog()  # what a surface attaching now catches up from
        self._reader: threading.Thread | None = None
        self._stderr_tail: deque[str] = deque(maxlen=40)
        self._stopping = False

    # ---------------------------------------------------------- start and stop

    def start(self) -> "SessionProcess":
        """Spawn the child and wait for its first line; SetupError with its one line if it failed."""
        self._process = subprocess.Popen(
            [sys.executable, "-m", CHILD_MODULE, json.dumps(self._request)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self._cwd,
            start_new_session=True)  # the terminal's ctrl+c is the dashboard's, not the session's
        assert self._process.stdout is not None and self._process.stderr is not None
        threading.Thread(target=self._drain_stderr, args=(self._process.stderr,), name="tidegauge-session-stderr",
                         daemon=True).start()
        first = self._process.stdout.readline()
        if not first:
            code = self._process.wait()
            raise SetupError(f"the session process exited ({code}) before it started: {self.stderr_tail()}")
        ready = json.loads(first)
        if ready.get("type") == "@failed":
            self._process.wait()
            raise SetupError(ready["message"])
        self._snapshot = SessionSnapshot(
            info=SessionInfoEvent.model_validate(ready["info"]), context=ContextEvent.model_validate(ready["context"]),
            state=StateEvent.model_validate(ready["state"]),
            restored=[event_adapter().validate_python(event) for event in ready["restored"]],
            busy=ready["busy"], queued=ready["queued"], seq=ready.get("seq", 0))
        self._facts = SessionFacts(info=self._snapshot.info, context=self._snapshot.context,
                                   state=self._snapshot.state)
        for line in ready.get("events", []):
            self._log.add(envelope_from_json(line))
        # Those the child's log kept standing after they left its ring, too.
        self._log.add_standing(envelope_from_json(line) for line in ready.get("standing", []))
        for queued in self._log.standing():
            if isinstance(queued.event, ev.CommandQueuedEvent):
                self._facts.queue.take_over(queued)
        self._reader = threading.Thread(target=self._read_events, args=(self._process.stdout,),
                                        name="tidegauge-session-events", daemon=True)
        self._reader.start()
        return self

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def session_id(self) -> str | None:
        """The session's id once the child said it was ready (what ``--resume`` takes)."""
        return self._facts.info.session_id if self._facts.info is not None else None

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def stop(self, timeout: float = 2.0) -> None:
        """Shut the session down (interrupting what runs), wait for the child, kill it if it hangs."""
        process = self._process
        if process is None:
            return
        self._stopping = True
        if process.poll() is None:
            try:
                self.submit(cmd.Shutdown(now=True))
                assert process.stdin is not None
                process.stdin.close()
            except (OSError, ValueError):
                pass
            try:
                wait_for_exit(process, timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _end_what_it_left()
        if self._reader is not None:
            self._reader.join(timeout)

    def stderr_tail(self) -> str:
        """The child's last lines on stderr (a traceback, if it crashed), for the user."""
        return " | ".join(self._stderr_tail) or "no output"

    # ---------------------------------------------------------- the Protocol

    @property
    def info(self) -> "SessionInfoEvent":
        assert self._facts.info is not None, "start() first"
        return self._facts.info

    def submit(self, command: cmd.Command) -> int:
        process = self._process
        assert process is not None and process.stdin is not None, "start() first"
        with self._write_lock:
            self._ids += 1
            command_id = self._ids
            try:
                process.stdin.write(encode_command(command, command_id))
                process.stdin.flush()
                return command_id
            except (BrokenPipeError, ValueError):
                pass
        if not self._stopping:  # the child is gone: say so again rather than drop the command
            from app.kernel.events import ErrorEvent

            self._dispatch(ErrorEvent(message=f"the session process has ended (exit {process.wait()}): "
                                              f"quit and run tidegauge --resume {self.info.session_id}"))
        return command_id

    def attach(self, listener: Listener) -> tuple[SessionSnapshot, Callable[[], None]]:
        with self._lock:  # the lock ``_dispatch`` moves the mirror on under: nothing slips between
            return self._snapshot_now(), self.subscribe(listener)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self._listeners.add(listener)

    def snapshot(self) -> SessionSnapshot:
        with self._lock:
            return self._snapshot_now()

    def _snapshot_now(self) -> SessionSnapshot:
        assert self._snapshot is not None, "start() first"
        facts = self._facts
        assert facts.info is not None and facts.context is not None and facts.state is not None
        return dataclasses.replace(self._snapshot, restored=list(self._snapshot.restored), events=self._log.events(),
                                   standing=self._log.standing(), info=self._log.server_compaction(facts.info),
                                   context=facts.context, state=facts.state, busy=facts.busy,
                                   queued=facts.queued)

    # ---------------------------------------------------------- threads

    def _read_events(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            try:
                envelope = envelope_from_json_line(line)
            except ValueError as error:  # bad JSON, a bad seq or command id, an event this version cannot read
                self._stderr_tail.append(f"unreadable event line ({error.__class__.__name__}): {line[:80]!r}")
                continue
            self._dispatch_numbered(envelope)
        code = self._process.wait() if self._process is not None else None
        _end_what_it_left()
        if not self._stopping:
            self._dispatch(ErrorEvent(message=f"the session process ended (exit {code}): {self.stderr_tail()}"))

    def _dispatch(self, event: "Event") -> None:
        """An event said here, not by the child (it is gone): next in the log all the same, no command."""
        with self._lock:
            assert self._snapshot is not None
            seq = self._snapshot.seq + 1
        self._dispatch_numbered(EventEnvelope(seq, None, event))

    def _dispatch_numbered(self, envelope: EventEnvelope) -> None:
        with self._lock:
            snapshot = self._snapshot
            assert snapshot is not None
            snapshot.seq = max(snapshot.seq, envelope.seq)
            self._log.add(envelope)
            self._facts.apply(envelope)
            listeners = self._listeners.current()
        for listener in listeners:
            listener(envelope)

    def _drain_stderr(self, stderr: IO[bytes]) -> None:
        for raw in stderr:
            text = raw.decode(errors="replace").rstrip()
            if text:
                self._stderr_tail.append(text)
