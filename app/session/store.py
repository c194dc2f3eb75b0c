"""Sessions on disk: ``<data_dir>/sessions/<id>/`` with the transcript, tool outputs and meta.

    transcript.jsonl   append-only, see app.session.transcript
    tool-results/      full outputs of truncated tool results
    meta.json          id, cwd (resolved), created, provider, model

Ids sort by creation time: ``20261129-211944-3fa2`` (UTC time + random).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from app.kernel.errors import SetupError
from app.kernel.private_files import make_private_dir, open_private_read, read_private, write_private_atomic
from app.session.lock import SessionLocked, acquire, release
from app.session.transcript import RestoredState, TranscriptWriter, restore
from app.kernel.describe import sanitize_for_display, session_row

__all__ = [
    "Session", "SessionError", "SessionLocked", "SessionMeta", "SessionNotFound", "SessionStore", "SessionSummary",
    "RestoredState", "restore", "new_session_id",
]

TRANSCRIPT_NAME = "transcript.jsonl"
TOOL_RESULTS_NAME = "tool-results"
REQUESTS_DIR_NAME = "requests"
META_NAME = "meta.json"
MAX_META_BYTES = 1024 * 1024  # a meta.json is a few hundred bytes: more is not ours
_ID_PATTERN = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4,}$")


class SessionError(SetupError):
    """A session that cannot be used; the message is one line for the user (exit code 2)."""


class SessionNotFound(SessionError):
    pass


class SessionMeta(BaseModel):
    id: str
    cwd: str
    created: float  # epoch seconds
    provider: str = ""
    model: str = ""
    forked_from: str = ""  # the session this one was copied from (--fork-session)

    def __getitem__(self, key: str) -> Any:  # meta["cwd"] works as well as meta.cwd
        return getattr(self, key)


@dataclass
class Session:
    id: str
    dir: Path
    cwd: Path
    transcript_path: Path
    tool_results_dir: Path
    meta: SessionMeta

    @property
    def requests_dir(self) -> Path:
        """The requests it sent, kept for the inspector (``app.kernel.request_store``)."""
        return self.dir / REQUESTS_DIR_NAME

    def writer(self) -> TranscriptWriter:
        """A writer appending to this session's transcript."""
        return TranscriptWriter(self.transcript_path)

    def restore(self) -> RestoredState:
        return restore(self)

    @property
    def last_activity(self) -> float:
        """When the transcript was last written (or the creation time)."""
        try:
            return max(self.meta.created, self.transcript_path.stat().st_mtime)
        except OSError:
            return self.meta.created


@dataclass
class SessionSummary:
    """What ``tidegauge sessions`` and the dashboard's picker show of a session, read from its transcript."""

    session: Session
    title: str = ""  # the first prompt
    turns: int = 0  # prompts typed
    context_tokens: int | None = None  # the context's size when it was last measured
    cost_usd: float | None = None  # every model call of the session (None: no known price)

    @property
    def has_prompt(self) -> bool:
        return self.turns > 0


# The transcript lines a summary reads (written compact, by app.session.transcript.encode_line).
_EVENT_LINE = b'{"kind":"event"'
_SUMMARY_TYPES = (b'"type":"user_message"', b'"type":"usage"', b'"type":"context"')
# A message the user typed (a tool result is a user message too, but not a typed one).
_MESSAGE_LINE = b'{"kind":"message"'
_TYPED_MESSAGE = b'"message":{"role":"user","content":[{"type":"text"'


def _is_prompt_line(raw: bytes) -> bool:
    return ((raw.startswith(_EVENT_LINE) and _SUMMARY_TYPES[0] in raw)
            or (raw.startswith(_MESSAGE_LINE) and _TYPED_MESSAGE in raw))


def summarize(session: Session) -> SessionSummary:
    """The session's title, prompts, last context size and cost (a damaged line is skipped)."""
    summary = SessionSummary(session=session)
    try:
        transcript = open_private_read(session.transcript_path)
    except OSError:
        return summary
    typed: list[str] = []  # the user's messages, for a transcript without user_message events
    with transcript:
        for raw in transcript:
            if raw.startswith(_MESSAGE_LINE) and _TYPED_MESSAGE in raw:
                typed.append(_message_text(raw))
                continue
            if not raw.startswith(_EVENT_LINE) or not any(kind in raw for kind in _SUMMARY_TYPES):
                continue
            try:
                event = json.loads(raw).get("event")
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            kind = event.get("type")
            if kind == "user_message" and isinstance(event.get("text"), str):
                summary.turns += 1
                summary.title = summary.title or event["text"]
            elif kind == "context" and isinstance(event.get("projected_tokens"), int):
                summary.context_tokens = event["projected_tokens"]
            elif kind == "usage" and isinstance(event.get("cost_usd"), (int, float)):
                summary.cost_usd = (summary.cost_usd or 0.0) + float(event["cost_usd"])
    if not summary.turns and typed:
        summary.turns, summary.title = len(typed), typed[0]
    return summary


def _message_text(raw: bytes) -> str:
    try:
        content = json.loads(raw)["message"]["content"]
        return " ".join(block.get("text", "") for block in content if isinstance(block, dict))
    except (ValueError, KeyError, TypeError):
        return ""


def holds_a_prompt(session: Session) -> bool:
    """Whether anything was ever typed in the session (a cheap scan: no line is parsed)."""
    return _holds_prompt(session.transcript_path)


def _holds_prompt(path: Path) -> bool:
    try:
        with open_private_read(path) as transcript:
            return any(_is_prompt_line(raw) for raw in transcript)
    except OSError:
        return False


def session_rows(data_dir: Path | str, cwd: Path | str | None, *, choice: bool = False) -> list[tuple[str, str]]:
    """(id, line) of the sessions of ``cwd`` (None: every directory, the directory at the end),
    newest first: what ``tidegauge sessions`` prints (``choice``: what the dashboard's picker lists)."""
    rows = []
    for summary in SessionStore(data_dir).summaries(cwd):
        session = summary.session
        line = session_row(session_id=session.id, started=_local_time(session.meta.created),
                           last_active=_local_time(session.last_activity), title=summary.title, turns=summary.turns,
                           context_tokens=summary.context_tokens, cost_usd=summary.cost_usd,
                           provider=session.meta.provider, model=session.meta.model, choice=choice)
        where = f"  ({sanitize_for_display(_shown(session.cwd))})" if cwd is None else ""
        rows.append((session.id, line + where))
    return rows


def _local_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


def remove_if_empty(directory: Path) -> bool:
    """Remove a session's folder if nothing was typed in it and no process holds it.

    Called when the session has ended (its own writer closed): the lock is taken again
    here, so a process that opened the session meanwhile (``--resume ID``) keeps it. Only
    a folder that is a session (its id as name, a meta.json) is ever removed.
    """
    transcript = directory / TRANSCRIPT_NAME
    if not _ID_PATTERN.match(directory.name) or not (directory / META_NAME).is_file():
        return False
    if _holds_prompt(transcript):
        return False
    try:
        lock = acquire(transcript)
    except (SessionLocked, OSError):
        return False
    try:
        if _holds_prompt(transcript):
            return False
        shutil.rmtree(directory, ignore_errors=True)
        return True
    finally:
        release(lock)


def new_session_id(now: float | None = None) -> str:
    stamp = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
    return f"{stamp:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class SessionStore:
    """All sessions under ``<data_dir>/sessions``."""

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.sessions_dir = self.data_dir / "sessions"

    def create(self, cwd: Path | str, provider: str, model: str | None, *, forked_from: str = "") -> Session:
        """A new, empty session for ``cwd``: its folder, tool-results/ and meta.json.

        Raises SessionError (one line) when the data dir cannot hold it: a file where
        a folder should be, no permission, a full disk.
        """
        resolved = Path(cwd).expanduser().resolve()
        try:
            self._make_sessions_dir()
            for _ in range(100):
                created = time.time()
                session_id = new_session_id(created)
                directory = self.sessions_dir / session_id
                try:
                    # Transcripts hold the user's code and conversation: user-only.
                    directory.mkdir(mode=0o700)
                except FileExistsError:
                    continue
                break
            else:  # pragma: no cover - 100 collisions of 16 random bits in one second
                raise SessionError(f"cannot create a session folder in {self.sessions_dir}")
            (directory / TOOL_RESULTS_NAME).mkdir(mode=0o700)
            meta = SessionMeta(id=session_id, cwd=str(resolved), created=created,
                               provider=provider or "", model=model or "", forked_from=forked_from)
            _write_json_atomic(directory / META_NAME, meta.model_dump(mode="json"))
        except OSError as err:
            raise SessionError(_os_problem(err, self.sessions_dir)) from None
        return self._session(directory, meta)

    def record_model(self, session: Session, model: str) -> None:
        """Write the model the provider was opened with into meta.json (``create`` knows only the
        one asked for, "" for the provider's usual one); ``tidegauge sessions`` names it."""
        session.meta.model = model
        try:
            _write_json_atomic(session.dir / META_NAME, session.meta.model_dump(mode="json"))
        except OSError as err:
            raise SessionError(_os_problem(err, session.dir)) from None

    def fork(self, source: Session) -> Session:
        """A new session with a copy of ``source``'s transcript and files, to continue apart.

        Works while another process writes ``source``: the copy takes the transcript
        as it is at this moment (a torn last line is skipped on restore, as after a kill).
        """
        session = self.create(source.cwd, source.meta.provider, source.meta.model, forked_from=source.id)
        try:
            for entry in source.dir.iterdir():
                if entry.name in (META_NAME,) or entry.name.endswith(".lock") or entry.name.startswith("."):
                    continue
                target = session.dir / entry.name
                if entry.is_dir() and not entry.is_symlink():
                    shutil.copytree(entry, target, symlinks=True, dirs_exist_ok=True)
                else:
                    shutil.copy2(entry, target, follow_symlinks=False)
        except OSError as err:
            raise SessionError(f"--fork-session: cannot copy session {source.id}: "
                               f"{_os_problem(err, session.dir)}") from None
        return session

    def _make_sessions_dir(self) -> None:
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise SessionError(f"data dir {_shown(self.data_dir)} is a file, not a folder "
                               "(set TIDEGAUGE_DATA_DIR or data_dir in config.toml to a folder)")
        make_private_dir(self.sessions_dir)  # the data dir too, when we create it

    def open(self, session_id: str) -> Session:
        """The session with this id (or an unambiguous prefix of one)."""
        session_id = session_id.strip()
        if not session_id or "/" in session_id or "\\" in session_id or session_id.startswith("."):
            raise SessionNotFound(f"no session {session_id!r} in {self.sessions_dir}")
        directory = self.sessions_dir / session_id
        if not (directory / META_NAME).is_file():
            matches = [d for d in self._dirs() if d.name.startswith(session_id)]
            if len(matches) != 1:
                raise SessionNotFound(f"no session {session_id!r} in {self.sessions_dir}")
            directory = matches[0]
        try:
            meta = _read_meta(directory)
        except (OSError, ValueError) as err:
            raise SessionError(f"session {directory.name}: unreadable {META_NAME} ({err})") from None
        return self._session(directory, meta)

    def list_all(self) -> list[Session]:
        """Every readable session, most recently active first."""
        sessions = []
        for directory in self._dirs():
            try:
                sessions.append(self._session(directory, _read_meta(directory)))
            except (OSError, ValueError):
                continue  # a half-created or damaged folder is not a session to offer
        sessions.sort(key=lambda s: (s.last_activity, s.meta.created, s.id), reverse=True)
        return sessions

    def list_for(self, cwd: Path | str) -> list[Session]:
        """Sessions started in ``cwd`` (resolved), most recently active first."""
        resolved = str(Path(cwd).expanduser().resolve())
        return [s for s in self.list_all() if s.meta.cwd == resolved]

    def latest_for(self, cwd: Path | str) -> Session | None:
        """The most recently active session of ``cwd`` in which something was typed, or None
        (one opened and closed without a prompt is nothing to continue)."""
        return next((s for s in self.list_for(cwd) if holds_a_prompt(s)), None)

    def summaries(self, cwd: Path | str | None) -> list[SessionSummary]:
        """The sessions of ``cwd`` (None: of every directory) that hold a prompt, newest first."""
        sessions = self.list_all() if cwd is None else self.list_for(cwd)
        return [summary for summary in map(summarize, sessions) if summary.has_prompt]

    # -- internals

    def _dirs(self) -> list[Path]:
        try:
            return [d for d in self.sessions_dir.iterdir() if d.is_dir() and _ID_PATTERN.match(d.name)]
        except OSError:
            return []

    def _session(self, directory: Path, meta: SessionMeta) -> Session:
        return Session(
            id=directory.name,
            dir=directory,
            cwd=Path(meta.cwd),
            transcript_path=directory / TRANSCRIPT_NAME,
            tool_results_dir=directory / TOOL_RESULTS_NAME,
            meta=meta,
        )


def _shown(path: Path) -> str:
    """A path for a message: undecodable bytes of the name shown escaped, never raised on."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def _os_problem(err: OSError, where: Path) -> str:
    """One line for an OSError while laying out sessions under ``where``."""
    culprit = Path(err.filename) if err.filename else where
    reason = err.strerror or type(err).__name__
    if isinstance(err, (NotADirectoryError, FileExistsError)):
        reason = "a file is in the way of a folder"
    return f"cannot create the session folder {_shown(culprit)} ({reason}); check the data dir"


def _read_meta(directory: Path) -> SessionMeta:
    raw = read_private(directory / META_NAME, MAX_META_BYTES).decode("utf-8")  # never through a symlink
    try:
        return SessionMeta.model_validate(json.loads(raw))
    except (json.JSONDecodeError, ValidationError) as err:
        raise ValueError(str(err).splitlines()[0]) from None


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    # ASCII escapes: a cwd with undecodable bytes (a lone surrogate once decoded) must not
    # make meta.json unwritable, and it reads back as the same str.
    payload = (json.dumps(data, ensure_ascii=True, indent=2) + "\n").encode("ascii")
    write_private_atomic(path, payload)  # 0600, a fresh temporary file: no symlink is followed
