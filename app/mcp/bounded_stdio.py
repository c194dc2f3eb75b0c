"""The stdio transport for MCP servers: the SDK's, with a reader that is linear and bounded.

The SDK's reader re-splits its whole buffer on every chunk, so one 100 MB line cost
240 s and 685 MB. This reader looks for the newline in each new chunk only, and a
message over ``max_message_bytes`` goes to a file under ``spill_dir`` as it arrives
(0600, no-follow, secrets redacted) instead of into memory. The session then gets, in place of that
message, an answer to the same request: the start of its text, the size, and
``_meta["tidegauge/cut"]`` naming the file (``app.mcp.content`` turns that into the
tool output's full-output path). Memory stays at the cap plus a few chunks whatever
the server sends.

Disk is bounded too: one message is saved up to ``MAX_SAVED_ANSWER_BYTES`` (the rest of a bigger
one is read and dropped: the server goes on), and every saved answer counts toward the session's
cap on saved outputs (``SavedOutputBudget``, ``max_session_saved_output``) as it is written; past
that cap an answer is cut without being saved, and says so. A message still going past
``MAX_READ_ANSWER_BYTES`` (a line whose end never comes) ends the server: a stdio stream cannot
skip to the next message without reading all of this one, and a server that never sends the
newline would hold the session forever. Its process tree is ended and ``on_stopped`` is told why
(the connection takes the crash path with those words).

Start-up and shutdown are the SDK's own (``mcp.client.stdio``): the same process
group, the same bounded close, stdin first.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
import uuid
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

import anyio
import anyio.lowlevel

from app.mcp.content import CUT_META_KEY
from app.kernel.redact import STREAM_HOLD_BACK, redact, safe_cut
from app.tools.registry import open_private

if TYPE_CHECKING:
    from app.tools.base import SavedOutputBudget

logger = logging.getLogger(__name__)

# One message from a server larger than this is cut at the transport (a tool result of
# 8 MiB is already 200 times what the registry shows the model).
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# What is read and saved of one message over the cap before tidegauge stops reading it: a url
# server's connection is closed (app.mcp.http_bounds), a stdio server is ended (it has no other way
# to skip the rest of a line). The saved file holds this much at most, plus one chunk.
MAX_SAVED_ANSWER_BYTES = 64 * 1024 * 1024
# What is read of one stdio message before its server is ended as one whose line has no end. A
# finite answer up to this size (a 100 MB file read) is cut, its first MAX_SAVED_ANSWER_BYTES
# saved, the rest read and dropped, and the server goes on; reading and dropping is linear and
# holds no memory, so the bound is on time (a few seconds of a pipe), not on space.
MAX_READ_ANSWER_BYTES = 256 * 1024 * 1024
# What is kept of a cut message: its start (the text the model gets a preview of, and the
# id when it comes first) and its end (the id, when the server writes it last).
_HEAD_BYTES = 64 * 1024
_TAIL_BYTES = 512
# The answer's id, at the start ({"jsonrpc":"2.0","id":7,...}, the Python SDK) or at the end
# ({"result":...,"jsonrpc":"2.0","id":7}, the TypeScript SDK).
_ID = r'(-?\d+|"(?:[^"\\]|\\.)*")'
_ID_AT_START = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID.encode())
_ID_AT_END = re.compile(rb'"id"\s*:\s*' + _ID.encode() + rb'\s*\}\s*$')
_TEXT_START = re.compile(rb'"text"\s*:\s*"')


class _RedactingFile:
    """A file written in pieces with every registered secret redacted, one cut across two pieces too.

    Text is held back until a cut point no secret crosses: the last ``STREAM_HOLD_BACK``
    characters wait for the next piece (a secret is far shorter), and a cut inside a copy of a
    secret moves to its start (``safe_cut``, as run_bash's output does). One search around the
    cut, not the three redactions of the text on both sides that comparing them took: a saved
    64 MiB answer's redaction 0.77 -> 0.51 CPU-s, 1.25 -> 0.83 for digits.
    """

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""

    def write(self, data: bytes) -> None:
        pending = self.pending + self.decoder.decode(data)
        cut = len(pending) - STREAM_HOLD_BACK
        if cut > 0:
            cut = safe_cut(pending, cut)
            self.file.write(redact(pending[:cut]).encode("utf-8"))
            pending = pending[cut:]
        self.pending = pending

    def close(self) -> None:
        self.file.write(redact(self.pending + self.decoder.decode(b"", final=True)).encode("utf-8"))
        self.file.close()


class _Message:
    """One line from the server as it arrives: in memory up to the cap, then in a file.

    What goes to the file is counted against ``budget`` (the session's cap on saved outputs) as
    it is written: once the cap is reached the file stops growing (``short_of_cap``), and a
    message spilled when nothing is left of it gets no file at all.
    """

    def __init__(self, max_bytes: int, spill_dir: Path | None, budget: SavedOutputBudget | None = None,
                 max_saved: int = MAX_SAVED_ANSWER_BYTES) -> None:
        self.max_bytes = max_bytes
        self.max_saved = max_saved
        self.cut_short = False  # past max_saved: the rest of the message is read, not kept
        self.spill_dir = spill_dir
        self.budget = budget
        self.parts: list[bytes] = []
        self.size = 0
        self.saved = 0  # bytes of the message written to the file (as the server sent them)
        self.short_of_cap = False  # the session's cap on saved outputs stopped the file short
        self.head = b""
        self.tail = b""
        self.file: _RedactingFile | None = None
        self.path: Path | None = None
        self.spilled = False

    def add(self, data: bytes) -> None:
        if not data:
            return
        self.size += len(data)
        if self.spilled:
            self._keep_tail(data)
            self._save(data)
            return
        self.parts.append(data)
        if self.size > self.max_bytes:
            self._spill()

    def _keep_tail(self, data: bytes) -> None:
        self.tail = (self.tail + data[-_TAIL_BYTES:])[-_TAIL_BYTES:]

    def _spill(self) -> None:
        whole = b"".join(self.parts)
        self.parts = []
        self.spilled = True
        self.head = whole[:_HEAD_BYTES]
        self._keep_tail(whole)
        if self.spill_dir is None:
            return
        if self.budget is not None and self.budget.room <= 0:
            self.short_of_cap = True  # nothing left of the session's cap: cut, not saved
            return
        self.path = self.spill_dir / f"mcp-answer-{uuid.uuid4().hex[:12]}.json"
        try:
            self.file = _RedactingFile(open_private(self.path))
        except OSError:
            self.file, self.path = None, None  # a planted symlink or a full disk: nothing saved
            return
        if self.budget is not None:
            self.budget.counted_as_written.add(str(self.path))
        self._save(whole)

    def _save(self, data: bytes) -> None:
        """``data`` to the file, as far as the session's cap on saved outputs lets it."""
        if self.file is None:
            return
        room = self.max_saved - self.saved
        if len(data) > room:
            data, self.cut_short = data[:max(room, 0)], True
        if self.budget is not None:
            granted = self.budget.take(len(data))
            if granted < len(data):
                data, self.short_of_cap = data[:granted], True
        try:
            if data:
                self.file.write(data)
                self.saved += len(data)
            if self.short_of_cap or self.cut_short:
                self._close_file()
        except OSError:
            self._close_file()  # a full disk: the file keeps what it got

    def _close_file(self) -> None:
        file, self.file = self.file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass

    def spill(self) -> None:
        """Go to the file now, whatever the size (a url server's event over the cap with its framing)."""
        if not self.spilled:
            self._spill()

    def finish(self) -> bytes | None:
        """The whole line (None when it was cut: see ``cut_answer``)."""
        self._close_file()
        if self.spilled:
            return None
        return b"".join(self.parts)


def _answer_id(head: bytes, tail: bytes) -> int | str | None:
    match = _ID_AT_START.match(head) or _ID_AT_END.search(tail)
    if match is None:
        return None
    value = json.loads(match.group(1))
    return value if isinstance(value, (int, str)) else None


def _text_preview(head: bytes) -> str:
    """The start of the first ``"text"`` string in ``head``, decoded (it is cut mid-string)."""
    match = _TEXT_START.search(head)
    if match is None:
        return ""
    raw = head[match.end():].decode("utf-8", errors="ignore")
    end = re.search(r'(?<!\\)(?:\\\\)*"', raw)
    if end is not None:
        raw = raw[:end.end() - 1]
    for trim in range(8):  # a cut escape sequence (\u12) at the end: drop it
        try:
            text = json.loads(f'"{raw[:len(raw) - trim]}"')
        except ValueError:
            continue
        return text if isinstance(text, str) else ""
    return ""


def where_saved(message: _Message, unfinished: bool) -> str:
    """Where a cut message is saved, and how much of it; or why it is not."""
    not_saved = message.budget.not_saved_note() if message.short_of_cap and message.budget is not None else ""
    if message.path is None:
        return not_saved or "it could not be saved"
    if not unfinished and not message.short_of_cap and not message.cut_short:
        return f"the whole answer, as the server sent it (JSON), is in {message.path}"
    where = f"its first {message.saved:,} bytes, as the server sent them, are in {message.path}"
    return f"{where}; {not_saved}" if not_saved else where


def cut_answer(message: _Message, request_id: int | str | None = None,
               unfinished: bool = False) -> dict[str, Any] | None:
    """A JSON-RPC answer standing in for a message cut at the transport (None: no id to answer).

    ``request_id``: the request's own id where the transport knows it (a url server's POST);
    ``unfinished``: the answer had not ended when the transport stopped reading it."""
    if request_id is None:
        request_id = _answer_id(message.head, message.tail)
    if request_id is None:
        return None
    preview = _text_preview(message.head)
    if unfinished:
        size = f"was still coming after {message.size:,} bytes (not read further)"
    else:
        size = f"was {message.size:,} bytes"
    where = where_saved(message, unfinished)
    text = (f"[tidegauge: the server's answer {size}, over the {message.max_bytes:,}-byte "
            f"limit for one MCP message, and was cut at the transport; {where}. "
            f"The start of its text follows.]\n{preview}")
    meta: dict[str, Any] = {"bytes": message.size}
    if message.path is not None:
        meta["path"] = str(message.path)
    return {"jsonrpc": "2.0", "id": request_id,
            # isError: the SDK then skips checking it against the tool's output schema (the
            # structured part was cut away); app.mcp.content clears it again for a cut answer.
            # messages / contents: the same text as a prompt's or a resource's answer (prompts/get,
            # resources/read), so a cut one reads as its start too rather than as a malformed answer.
            "result": {"content": [{"type": "text", "text": text}], "resultType": "complete", "isError": True,
                       "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
                       "contents": [{"uri": "tidegauge:cut", "mimeType": "text/plain", "text": text}],
                       "_meta": {CUT_META_KEY: meta}}}


async def read_lines(stdout: Any, deliver: Any, max_bytes: int, spill_dir: Path | None,
                     budget: SavedOutputBudget | None = None,
                     max_saved: int = MAX_SAVED_ANSWER_BYTES, max_read: int = MAX_READ_ANSWER_BYTES) -> str | None:
    """Every line of ``stdout`` (an anyio byte stream) to ``deliver(line_or_answer)``.

    Linear in what arrives: each chunk is searched for newlines once. ``deliver`` gets
    bytes for a whole line, or a dict for the answer standing in for a cut one.
    Returns None at the end of ``stdout``; or, when a line went on past ``max_read`` bytes
    without its end, stops reading there and returns why (what was saved of it, or why not).
    """
    def new_message() -> _Message:
        return _Message(max_bytes, spill_dir, budget, max_saved)

    def ended(line_message: _Message, batch: list[bytes | dict[str, Any]]) -> None:
        """The line ``line_message`` held has ended: its bytes, or the answer for a cut one, to ``batch``."""
        line = line_message.finish()
        if line is not None:
            if line.strip():
                batch.append(line)
            return
        answer = cut_answer(line_message)
        if answer is not None:
            batch.append(answer)
        else:
            logger.warning("an MCP message of %d bytes was over the limit and had no id; dropped", line_message.size)

    message = new_message()
    async for chunk in stdout:
        pieces = chunk.split(b"\n")  # one C call per chunk: a flood of small lines costs no Python per byte
        if len(pieces) > 1:
            batch: list[bytes | dict[str, Any]] = []  # the chunk's whole lines, delivered together below
            message.add(pieces[0])
            ended(message, batch)
            for line in pieces[1:-1]:  # lines that began and ended inside this chunk
                if len(line) <= max_bytes:
                    if line.strip():
                        batch.append(line)
                else:
                    whole = new_message()
                    whole.add(line)
                    ended(whole, batch)
            message = new_message()
            for kept in superseded_progress_dropped(batch):
                await deliver(kept)
        message.add(pieces[-1])
        if message.size > max_read:
            message.finish()
            return (f"it sent one message still going after {message.size:,} bytes without its end "
                    f"(over the {max_read:,}-byte limit), so tidegauge stopped it; "
                    f"{where_saved(message, unfinished=True)}")
    message.finish()
    return None


# A progress notification's token, read off the line's bytes: parsing each of a flood of them as JSON
# cost more than the SDK's own work on the few that are kept.
_PROGRESS_TOKEN = re.compile(rb'"progressToken"\s*:\s*("[^"\\]*"|-?\d+)')


def _progress_tokens(lines: list[bytes | dict[str, Any]]) -> list[bytes | None]:
    """Each line's token if it is a ``notifications/progress`` line, as its bytes (None for any other message).

    A line with an ``"id"`` is a request or an answer, never taken for progress whatever its text
    holds (an answer quoting MCP traffic keeps its quotes escaped). A server that writes its own
    notifications in a stranger shape can at worst have one of its own messages dropped. One
    comprehension, not a call per line: it runs on every line of a flood."""
    search = _PROGRESS_TOKEN.search
    return [found.group(1) if isinstance(line, bytes) and b'"notifications/progress"' in line
            and b'"id"' not in line and (found := search(line)) is not None else None
            for line in lines]


def superseded_progress_dropped(lines: list[bytes | dict[str, Any]]) -> list[bytes | dict[str, Any]]:
    """``lines`` without each progress notification that the very next line supersedes (a newer one for
    the same token): a server may send tens of thousands a second, and the SDK spends about a
    millisecond on each, so a flood took 20 times the server's own time. Only the newest of a run
    is kept; nothing else is dropped or reordered."""
    if len(lines) < 2:
        return lines
    tokens = _progress_tokens(lines)
    kept = [line for line, token, following in zip(lines, tokens, tokens[1:]) if token is None or following != token]
    kept.append(lines[-1])
    return kept


@asynccontextmanager
async def bounded_stdio_client(server: Any, errlog: TextIO, *, spill_dir: Path | None,
                               saved_output_budget: SavedOutputBudget | None = None,
                               on_stopped: Callable[[str], None] = lambda _reason: None,
                               on_bad_line: Callable[[str], None] = lambda _line: None,
                               on_exited: Callable[[int | None], None] = lambda _status: None,
                               on_spawned: Callable[[int], None] = lambda _pid: None,
                               max_message_bytes: int = MAX_MESSAGE_BYTES,
                               max_saved: int = MAX_SAVED_ANSWER_BYTES) -> AsyncGenerator[Any, None]:
    """``mcp.client.stdio.stdio_client`` with ``read_lines`` as its reader.

    ``saved_output_budget``: the session's cap on saved outputs, which cut answers count toward;
    ``on_stopped(reason)``: told when the transport ended a server that sent a message without end
    (called before the session sees the connection close, so a pending call reads that reason);
    ``on_bad_line(text)``: a stdout line that is not a JSON-RPC message (never handed to the SDK, whose
    parser logs a traceback of kilobytes for each to our stderr); ``on_exited(status)``: the server's
    exit status once its stdout ended (None when it had not exited within half a second);
    ``on_spawned(pid)``: the server's process id as soon as it is started, before the handshake."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    import mcp_types as types
    from mcp.client import stdio as sdk
    # The SDK's stdio_client takes no reader of ours, so this is its body with read_lines in it.
    # Starting, draining and ending the process stay the SDK's own private helpers
    # (_get_executable_command, _create_platform_compatible_process, _drain_stdout,
    # _terminate_process_tree, _stop_server_process, _aclose_all, _WRITER_FLUSH_TIMEOUT): copying
    # them would fork its process-tree handling. tests/test_mcp_sdk_private_calls.py pins each
    # one's name and signature, so an SDK upgrade that changes them fails there, not in a session.
    from mcp.shared.message import SessionMessage

    command = await sdk._get_executable_command(server.command)
    process = await sdk._create_platform_compatible_process(
        command=command, args=server.args, env=sdk.get_default_environment() | (server.env or {}),
        errlog=errlog, cwd=server.cwd)
    on_spawned(process.pid)
    # No awaits until the task group is entered, or a cancellation in the gap would leak the process.
    read_stream_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()

    async def deliver(line: bytes | dict[str, Any]) -> None:
        try:
            if isinstance(line, dict):
                item: SessionMessage | Exception = SessionMessage(types.jsonrpc_message_adapter.validate_python(line))
            else:
                item = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as exc:
            if isinstance(line, dict):
                item = exc
            else:
                on_bad_line(line.decode("utf-8", errors="replace"))
                return
        await read_stream_writer.send(item)

    async def stdout_reader() -> None:
        assert process.stdout, "Opened process is missing stdout"
        try:
            async with read_stream_writer:
                stopped: str | None = None
                try:
                    stopped = await read_lines(process.stdout, deliver, max_message_bytes, spill_dir,
                                               saved_output_budget, max_saved)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the session is gone; only the drain below remains
                finally:
                    if stopped is None:
                        await sdk._drain_stdout(process)
                if stopped is None:  # the end of stdout: the server exited (or is about to)
                    with anyio.move_on_after(0.5):
                        await process.wait()
                    on_exited(process.returncode)
                    return
                # A line without end: nothing after it can be read, so the server goes, as a crashed one
                # does. Told first, then ended; the session then sees the connection close.
                on_stopped(stopped)
                with anyio.CancelScope(shield=True):
                    await sdk._terminate_process_tree(process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed the stdout stream under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("Reading from the MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        assert process.stdin, "Opened process is missing stdin"
        try:
            async with write_stream_reader:
                async for session_message in write_stream_reader:
                    data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()  # the session sees the connection end, not a hang
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await sdk._stop_server_process(process)
        await sdk._aclose_all(read_stream, write_stream, read_stream_writer, write_stream_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # bounded inside: the server never outlives us
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
