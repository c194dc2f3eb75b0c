"""run_bash: a shell command in the workspace, bounded in time, memory and disk.

The command runs in its own process group with a marker in its environment,
and tidegauge is a child subreaper (see ``proctree``), so a timeout or an
interrupt kills everything it started, also what left the group (setsid).
bash gets SIGKILL from the kernel if tidegauge is killed outright (PR_SET_PDEATHSIG, set by
setpriv in front of the command, so the start is a vfork: a fork cost 13-80 ms of CPU a
command at 100-800 MB of tidegauge).
The saved full output stops growing at ``max_saved_output`` bytes; the tail
beyond it is still kept. Output is taken from the pipe as it arrives: up
to twice ``keep`` characters stay in memory; past that the whole output
streams to the tool-results file (secrets redacted) and only a head and a
tail of ``keep`` characters each are held, so ``yes | head -c 200000000``
costs disk, not memory.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import subprocess
from collections import deque
from pathlib import Path

from pydantic import Field, model_validator

from app.kernel.messages import ToolSpec
from app.kernel.redact import STREAM_HOLD_BACK, redact, safe_cut
from app.system import proctree
from app.tools.sandbox import SandboxPolicy
from app.tools.base import DEFAULT_MAX_SAVED_OUTPUT, ArgsTool, ToolArgs, ToolContext, ToolInputError, ToolOutput
from app.context.truncation import join_head_tail
from app.kernel.private_files import open_private
from app.tools.saved_file import CappedFile, safe_file_stem
from app.tools.workspace import output_limit

DEFAULT_TIMEOUT_S = 120
MAX_TIMEOUT_S = 600
MIN_KEEP_CHARS = 64 * 1024
# With truncation off the model asked for everything: keep far more, still bounded.
UNTRUNCATED_KEEP_CHARS = 16 * 1024 * 1024
KILL_GRACE_S = 2.0
# An interrupt is the user waiting: the tool must end well within a second.
INTERRUPT_GRACE_S = 0.2
# After bash exits, how long a background process holding the pipe open may delay us.
EOF_GRACE_S = 1.0

# Provider keys are removed by the caller; this is the second guard.
_SECRET_SUFFIXES = ("_API_KEY", "_AUTH_TOKEN", "_API_TOKEN")
_QUIET_TERMINAL = {
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
}


def keep_chars_for(limit_chars: int) -> int:
    """Characters of head (and of tail) to hold: at least what the registry will keep."""
    if limit_chars <= 0:
        return UNTRUNCATED_KEEP_CHARS
    return max(MIN_KEEP_CHARS, limit_chars * 2 // 5 + 1)


def child_env(env: dict[str, str], marker: str = "") -> dict[str, str]:
    base = dict(env) if env else dict(os.environ)
    clean = {k: v for k, v in base.items() if not k.upper().endswith(_SECRET_SUFFIXES)}
    clean.update(_QUIET_TERMINAL)
    if marker:
        clean[proctree.MARKER_ENV] = marker
    return clean


def _append(output: str, suffix: str) -> str:
    """The exit line goes on a line of its own, without a blank line before it."""
    if output.endswith("\n") and suffix.startswith("\n"):
        suffix = suffix[1:]
    return output + suffix


def _visible(text: str) -> str:
    """Bytes that were not UTF-8 (kept as surrogates so the file gets them back) -> U+FFFD."""
    if text.isascii():  # no surrogate to replace; the round trip would copy a 15 MB output twice
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", errors="replace")


class _RedactingWriter:
    """Streams text to a file with secrets redacted, also when a key is split across chunks.

    The last ``STREAM_HOLD_BACK`` characters wait for the next chunk, and the cut before them
    is moved before any copy of a key lying across it (``safe_cut``): a key, or its base64
    folded over lines, cut between two reads is redacted whole once its end has arrived.
    """

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_SAVED_OUTPUT) -> None:
        self.file = CappedFile(open_private(path), max_bytes)
        self.pending = ""

    def write(self, text: str) -> None:
        pending = self.pending + text
        cut = len(pending) - STREAM_HOLD_BACK
        if cut <= 0:
            self.pending = pending
            return
        cut = safe_cut(pending, cut)
        if cut:
            self.file.write(redact(pending[:cut]).encode("utf-8", "surrogateescape"))
        self.pending = pending[cut:]

    def close(self) -> None:
        try:
            self.file.write(redact(self.pending).encode("utf-8", "surrogateescape"))
        finally:
            self.file.close()


class _OutputCollector:
    """Holds the output in memory while small, then streams all of it to disk.

    Decoding is incremental with surrogateescape: characters split between two
    reads come out whole, and the file gets back exactly the bytes that were
    not UTF-8.
    """

    def __init__(self, keep: int, spill_path: Path, max_saved: int = DEFAULT_MAX_SAVED_OUTPUT,
                 not_saved_note: str = "") -> None:
        self.keep = keep
        self.not_saved_note = not_saved_note  # says why, when max_saved is 0 (the session's cap)
        self.spill_path = spill_path
        self.max_saved = max_saved
        self.total_bytes = 0
        self.total_chars = 0
        self.spilled = False
        self.spill: _RedactingWriter | None = None
        self.head = ""
        self._parts: list[str] = []  # everything, until it outgrows 2 * keep characters
        self._tail: deque[str] = deque()  # after spilling: the latest chunks
        self._buffered = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")

    def feed(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        self._take(self._decoder.decode(chunk))

    def _take(self, text: str) -> None:
        if not text:
            return
        self.total_chars += len(text)
        self._buffered += len(text)
        if not self.spilled:
            self._parts.append(text)
            if self._buffered > 2 * self.keep:
                self._start_spilling()
            return
        if self.spill is not None:
            self.spill.write(text)
        self._tail.append(text)
        while self._buffered - len(self._tail[0]) >= self.keep:
            self._buffered -= len(self._tail.popleft())

    def _start_spilling(self) -> None:
        everything = "".join(self._parts)
        self._parts = []
        self.spilled = True
        try:
            if self.max_saved > 0:  # 0: the session's saved outputs reached their cap
                self.spill = _RedactingWriter(self.spill_path, self.max_saved)
                self.spill.write(everything)
        except OSError:
            self.spill = None  # the notice will say nothing was saved
        self.head = everything[: self.keep]
        self._tail = deque([everything[-self.keep :]])
        self._buffered = self.keep

    def close(self) -> None:
        if self.spill is not None:
            with contextlib.suppress(OSError):
                self.spill.close()
            self.spill = None

    def finish(self, suffix: str) -> ToolOutput:
        """The text for the model, ``suffix`` (the exit line) after the output.

        A spilled output gets the suffix in its file too, so the saved file is the
        full text whichever way it was saved.
        """
        self._take(self._decoder.decode(b"", final=True))
        if not self.spilled:
            return ToolOutput(_append(_visible("".join(self._parts)), suffix))
        tail = "".join(self._tail)[-self.keep :]
        if tail.endswith("\n") and suffix.startswith("\n"):
            suffix = suffix[1:]
        path: str | None = None
        saved_note = self.not_saved_note if self.max_saved <= 0 else ""
        if self.spill is not None:
            with contextlib.suppress(OSError):
                self.spill.write(suffix)
                self.spill.close()
                path = str(self.spill_path)
                saved_note = self.spill.file.note()
            self.spill = None
        total = self.total_chars + len(suffix)
        return ToolOutput(
            join_head_tail(_visible(self.head), _visible(tail) + suffix, total, path, saved_note),
            full_output_path=Path(path) if path else None,
            original_chars=total,
            saved_note=saved_note,
        )


class _BashProtocol(asyncio.SubprocessProtocol):
    """Feeds the pipe straight into the collector; tells apart exit and end of output.

    (``Process.wait()`` also waits for the pipe to close, which a background
    process started by the command can hold open for ever.)
    """

    def __init__(self, collector: _OutputCollector, loop: asyncio.AbstractEventLoop) -> None:
        self.collector = collector
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.collector.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.output_closed.done():
            self.output_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def _kill_tree(
    marker: str, pid: int, exited: asyncio.Future[None], grace_s: float
) -> None:
    """SIGTERM the whole run, give it ``grace_s``, then SIGKILL whatever of it is left.

    "The whole run" is bash's process group, its descendants, and everything
    carrying the run's marker (what left the group with setsid and was
    re-parented to us). The scans of /proc run in a thread so an interrupt
    (cancel) cannot be held up by them, and they are shielded so the kill
    always finishes.
    """
    kill = asyncio.ensure_future(_terminate_then_kill(marker, pid, exited, grace_s))
    try:
        await asyncio.shield(kill)
    except asyncio.CancelledError:
        await kill  # a second interrupt: the SIGKILL is already on its way; let it land
        raise


async def _terminate_then_kill(marker: str, pid: int, exited: asyncio.Future[None], grace_s: float) -> None:
    await asyncio.to_thread(proctree.signal_run, marker, pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), grace_s)
    # Children may survive bash or ignore SIGTERM; the run goes regardless.
    await asyncio.to_thread(proctree.kill_run, marker, pid, spare=pid)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), KILL_GRACE_S)


def _exit_line(returncode: int | None) -> str:
    if returncode is None:
        return "[exit code: unknown]"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"[exit code: {returncode} (killed by {name})]"
    return f"[exit code: {returncode}]"


class RunBashArgs(ToolArgs):
    command: str = Field(description="The bash command to run.")
    # Above the maximum is clamped, not refused.
    timeout: int = Field(
        DEFAULT_TIMEOUT_S,
        ge=1,
        description=f"Seconds before the command is killed (default {DEFAULT_TIMEOUT_S}).",
        json_schema_extra={"maximum": MAX_TIMEOUT_S},
    )
    # Strict: only a JSON true asks to leave the sandbox, exactly what the approval checks
    # (escape_reason); "true" or 1 are refused, never read as a yes the approval did not see.
    unsandboxed: bool = Field(
        False,
        strict=True,
        description="Run outside the sandbox (network, writes outside the workspace and /tmp). The user is "
                    "always asked first, with your reason; use it only after a sandboxed try failed for that.",
    )
    reason: str = Field("", max_length=500, description="With unsandboxed: why the command needs it, in a few words.")

    @model_validator(mode="after")
    def _escape_has_a_reason(self) -> RunBashArgs:
        if self.unsandboxed and not self.reason.strip():
            raise ValueError("unsandboxed needs a reason: say in a few words why the command needs the network "
                             "or a write outside the workspace")
        return self


def escape_reason(spec: ToolSpec, tool_input: dict[str, object], sandbox: SandboxPolicy) -> str | None:
    """The reason a call gives for running outside the sandbox, when its tool takes run_bash's
    ``unsandboxed`` (run_bash, a wrapper with its schema), it asks to, and the sandbox is on; else
    None: the call runs as every other. "" when it gives none."""
    if (tool_input.get("unsandboxed") is not True or not sandbox.active
            or "unsandboxed" not in (spec.input_schema.get("properties") or {})):
        return None
    reason = tool_input.get("reason")
    return reason.strip() if isinstance(reason, str) else ""


class RunBashTool(ArgsTool[RunBashArgs]):
    name = "run_bash"
    Args = RunBashArgs
    mutating = True
    description = (
        "Run a bash command in the workspace and return its combined stdout and stderr "
        f"followed by the exit code. Default timeout {DEFAULT_TIMEOUT_S} s (timeout "
        f"argument, at most {MAX_TIMEOUT_S}); on timeout the command and everything it "
        "started are killed. stdin is empty: nothing interactive. Do NOT use it to read "
        "files (no cat/head/less on source files): use read_file, which pages and numbers "
        "lines. Long outputs are cut to their head and tail with the full output saved to "
        "a file, so narrow them at the source: grep -n PATTERN, head, tail, wc -l. For a "
        "long-running server, run it in the background with its output redirected to a "
        "file: nohup CMD > server.log 2>&1 &. When tidegauge has a sandbox, commands run in it: "
        "only the workspace and /tmp are writable, there is no network, and what a command leaves "
        "running ends with it. A command that needs more may ask with unsandboxed: true and a reason "
        "(the user is asked)."
    )

    async def call(self, args: RunBashArgs, ctx: ToolContext) -> ToolOutput:
        command = args.command
        if not command.strip():
            raise ToolInputError("command is empty; give a bash command to run.")
        timeout = min(args.timeout, MAX_TIMEOUT_S)
        sandbox = ctx.sandbox
        if (refused := sandbox.refusal()) is not None:
            raise ToolInputError(refused)
        argv = ["bash", "-c", command]
        env = child_env(ctx.env, marker := proctree.new_marker())
        if sandbox.active and args.unsandboxed and ctx.approved_escape != ctx.call_id:
            # Whatever called the tool (a wrapper under another name) did not ask the user.
            raise ToolInputError("unsandboxed was not approved for this call: it did not run.")
        if sandbox.active and not args.unsandboxed:
            argv = sandbox.wrap(argv, Path(ctx.workspace))
            env["TMPDIR"] = "/tmp"  # the sandbox's own, empty at each command
        proctree.enable_subreaper()
        # Killed by the kernel if tidegauge is (kill -9, the OOM killer): relative to this thread,
        # the event loop's, which lives as long as the session can run a tool.
        argv, preexec = proctree.dying_with_parent(argv)
        spill_path = Path(ctx.tool_results_dir) / f"{safe_file_stem(ctx.call_id)}.txt"
        collector = _OutputCollector(keep_chars_for(output_limit.get()), spill_path, ctx.max_saved_output,
                                     ctx.saved_output_budget.not_saved_note())
        loop = asyncio.get_running_loop()
        # The command is already running while its pipes connect; shielded so an
        # interrupt in that moment still finds the process group to kill.
        starting = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: _BashProtocol(collector, loop),
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=ctx.workspace,
                env=env,
                start_new_session=True,  # its own process group: pgid == pid
                preexec_fn=preexec,
            )
        )
        try:
            transport, protocol = await asyncio.shield(starting)
        except OSError as exc:
            collector.close()
            raise ToolInputError(f"Could not start bash: {exc}.") from exc
        except asyncio.CancelledError:
            with contextlib.suppress(OSError):
                transport, protocol = await starting
                try:
                    await _kill_tree(marker, transport.get_pid(), protocol.exited, INTERRUPT_GRACE_S)
                finally:
                    transport.close()
            collector.close()
            raise
        pid = transport.get_pid()
        timed_out = held_open = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(protocol.exited), timeout)
            except TimeoutError:
                timed_out = True
                await _kill_tree(marker, pid, protocol.exited, KILL_GRACE_S)
            try:
                await asyncio.wait_for(asyncio.shield(protocol.output_closed), EOF_GRACE_S)
            except TimeoutError:
                held_open = True
        except BaseException as exc:
            try:
                if isinstance(exc, asyncio.CancelledError):
                    await _kill_tree(marker, pid, protocol.exited, INTERRUPT_GRACE_S)
            finally:
                collector.close()
            raise
        finally:
            transport.close()
        # What it left running on purpose (nohup server &) lives on; remember it so it is reaped.
        await asyncio.to_thread(proctree.adopt_orphans, marker, pid)
        returncode = transport.get_returncode()
        if timed_out:
            suffix = (
                f"\n[timed out after {timeout} s: the command and every process it started were "
                "killed. Narrow it (grep/head/tail, smaller inputs), raise timeout (max "
                f"{MAX_TIMEOUT_S}), or run it in the background with output to a file: "
                "nohup CMD > out.log 2>&1 &]"
            )
        else:
            suffix = "\n" + _exit_line(returncode)
            if held_open:
                suffix += (
                    "\n[a background process still holds the output open; its further output "
                    "is not captured. Redirect background output to a file.]"
                )
        if collector.total_bytes == 0:
            suffix = "(no output)" + suffix
        output = collector.finish(suffix)
        output.is_error = timed_out
        return output
