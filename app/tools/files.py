"""File tools: read_file, list_files, write_file, edit_file.

Each bounds its own output (2,000 lines of 2,000 characters, and a byte budget
per read; 500 entries) because the best truncation is not reading that much in
the first place; the registry's head+tail truncation is the backstop.

Every path goes through the race-free walk in ``workspace`` and every byte of
I/O runs in ``run_blocking``: a cancelled call returns at once and its thread
stops at the next block.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import Field

from app.context.file_cache import FileReadCache
from app.tools.base import ArgsTool, ToolArgs, ToolContext, ToolInputError, ToolOutput
from app.tools.workspace import (
    CancelFlag,
    Located,
    OpenedFile,
    display_path,
    not_found_message,
    open_directory,
    open_file_for_reading,
    open_file_for_writing,
    run_blocking,
    shown_name,
)

MAX_LINES = 2_000
MAX_LINE_CHARS = 2_000
MAX_LIST_ENTRIES = 500
BINARY_SNIFF_BYTES = 8_192
# Counting the lines after the range stops here (a multi-GB file says "more").
_COUNT_REMAINING_BYTES = 32 * 1024 * 1024
# Skipping to a far offset scans at most this much; past it the model is told to use other means.
_SKIP_SCAN_BYTES = 256 * 1024 * 1024
_BLOCK = 1024 * 1024
# Enough bytes for MAX_LINE_CHARS characters of up to 4 bytes each, plus "\r\n".
_LINE_HEAD_BYTES = MAX_LINE_CHARS * 4 + 2
# Listing stops counting here, so a huge tree cannot stall the tool.
_LIST_SCAN_CAP = 200_000

SKIPPED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", ".jj", "node_modules", "bower_components", "__pycache__",
        ".venv", "venv", ".virtualenvs", "virtualenvs", ".mypy_cache", ".pytest_cache",
        ".ruff_cache", ".hypothesis", ".tox", ".nox", "dist", "build", ".eggs",
        ".gradle", ".next", ".nuxt", ".parcel-cache", ".turbo", ".cache", ".terraform",
        ".idea", ".vscode", "htmlcov", ".ipynb_checkpoints",
    }
)


def file_cache(ctx: ToolContext) -> FileReadCache:
    """The session's cache; created on first use when the engine did not set one."""
    if ctx.file_cache is None:
        ctx.file_cache = FileReadCache()
    cache: FileReadCache = ctx.file_cache
    return cache


def _cache_key(opened: OpenedFile | Path) -> str:
    """The file cache's key for a file: its real path, escaped (the cache's notes name it)."""
    real = opened.real if isinstance(opened, OpenedFile) else opened
    return shown_name(str(real))


def _errors_to_tool_errors(raw: str, ctx: ToolContext, exc: OSError, *, action: str) -> ToolInputError:
    """What the model should hear for a filesystem error on ``raw``."""
    shown = shown_name(raw)
    if isinstance(exc, FileNotFoundError):
        return ToolInputError(not_found_message(raw, ctx))
    if isinstance(exc, IsADirectoryError):
        return ToolInputError(f"{shown} is a directory, not a file. Use list_files to see inside it.")
    if isinstance(exc, NotADirectoryError):
        return ToolInputError(
            f"{shown}: a part of this path is a file, not a directory. Check the path with list_files."
        )
    if isinstance(exc, PermissionError):
        return ToolInputError(f"Permission denied: cannot {action} {shown}.")
    if exc.errno == errno.ENOSPC:
        return ToolInputError(f"No space left on the device: cannot {action} {shown}.")
    reason = exc.strerror or type(exc).__name__
    return ToolInputError(f"Cannot {action} {shown}: {reason}.")


# --- read_file ---------------------------------------------------------------------


@dataclass
class ReadRange:
    lines: list[str]  # formatted, line-numbered
    first_line: int
    last_line: int
    total_lines: int | None  # None: more than could be counted cheaply
    sha256: str
    mtime_ns: int
    size: int
    real: Path
    shown: str
    budget_hit: bool  # the byte budget ended the read (not the line limit or the end)


@dataclass
class _Budget:
    """Bytes one read_file call may still consume for the lines it returns."""

    left: int


def _skip_lines(f: IO[bytes], count: int, flag: CancelFlag) -> tuple[int, bool]:
    """Move past ``count`` lines by counting newlines in blocks.

    Returns the lines skipped and whether the scan stopped at its byte limit first.
    """
    skipped = scanned = 0
    while skipped < count:
        flag.check()
        if scanned >= _SKIP_SCAN_BYTES:
            return skipped, True
        start = f.tell()
        block = f.read(_BLOCK)
        if not block:
            return skipped, False
        scanned += len(block)
        newlines = block.count(b"\n")
        if skipped + newlines < count:
            skipped += newlines
            continue
        pos = -1
        for _ in range(count - skipped):
            pos = block.index(b"\n", pos + 1)
        f.seek(start + pos + 1)
        return count, False
    return skipped, False


def _count_lines(f: IO[bytes], budget: int, flag: CancelFlag) -> int | None:
    """Lines left from the current position, or None when over ``budget`` bytes."""
    lines, read, last = 0, 0, b"\n"
    while block := f.read(_BLOCK):
        flag.check()
        lines += block.count(b"\n")
        read += len(block)
        last = block[-1:]
        if read > budget:
            return None
    return lines + (0 if last == b"\n" else 1)


def _read_line(f: IO[bytes], digest: Any, budget: _Budget, flag: CancelFlag) -> tuple[str, int, bool] | None:
    """One line: its first MAX_LINE_CHARS characters, its length in characters, and
    whether the byte budget ran out inside it (then the length is a lower bound).

    A line longer than that is consumed in chunks, so a single 10 MB line does not
    have to sit in memory; it is consumed only up to the budget.
    """
    head = f.readline(min(_LINE_HEAD_BYTES, budget.left))
    if not head:
        return None
    budget.left -= len(head)
    digest.update(head)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(head)
    length = len(text)
    cut = False
    while not head.endswith(b"\n"):
        if budget.left <= 0:
            # Is there more of this line? Peek one byte (the read is over anyway).
            cut = bool(f.read(1))
            break
        flag.check()
        head = f.readline(min(_BLOCK, budget.left))
        if not head:
            break
        budget.left -= len(head)
        digest.update(head)
        length += len(decoder.decode(head))
    length += len(decoder.decode(b"", final=True))
    text = text[: MAX_LINE_CHARS + 2].rstrip("\n").removesuffix("\r")
    length -= 1 if head.endswith(b"\n") else 0
    return text, length, cut


def _read_range(raw: str, ctx: ToolContext, offset: int, limit: int, flag: CancelFlag) -> ReadRange:
    return read_opened_range(open_file_for_reading(raw, ctx), offset, limit, flag, ctx.read_max_bytes)


def read_opened_range(
    opened: OpenedFile, offset: int, limit: int, flag: CancelFlag, read_max_bytes: int
) -> ReadRange:
    """Numbered lines ``offset``.. of an open regular file (closed here), bounded in lines and bytes."""
    shown, st = opened.shown, opened.st
    with os.fdopen(opened.fd, "rb") as f:
        if b"\0" in f.read(BINARY_SNIFF_BYTES):
            raise ToolInputError(
                f"{shown} looks like a binary file ({st.st_size:,} bytes with NUL bytes); "
                "read_file shows text only. To inspect it use run_bash, e.g. "
                f"`file {shown}` or `xxd {shown} | head -50`."
            )
        f.seek(0)
        skipped, scan_stopped = _skip_lines(f, offset - 1, flag)
        if scan_stopped:
            raise ToolInputError(
                f"offset {offset:,} is too far into {shown}: after scanning "
                f"{_SKIP_SCAN_BYTES // (1024 * 1024):,} MB only {skipped:,} lines had passed. Use "
                f"run_bash to get there, e.g. `tail -c 20000 {shown}` or `grep -n PATTERN {shown}`."
            )
        digest = hashlib.sha256()
        budget = _Budget(max(1, read_max_bytes))
        lines: list[str] = []
        budget_hit = False
        while len(lines) < limit:
            if budget.left <= 0:
                budget_hit = True
                break
            line = _read_line(f, digest, budget, flag)
            if line is None:
                break
            text, length, cut = line
            number = offset + len(lines)
            if length > MAX_LINE_CHARS or cut:
                of = f"at least {length:,}" if cut else f"{length:,}"
                text = (
                    f"{text[:MAX_LINE_CHARS]} … [line cut at {min(length, MAX_LINE_CHARS):,} of "
                    f"{of} characters; see the rest with run_bash, e.g. "
                    f"`sed -n {number}p {shown} | cut -c {MAX_LINE_CHARS + 1}-{MAX_LINE_CHARS * 3}`]"
                )
            lines.append(f"{number:>6}\t{text}")
            if cut:
                budget_hit = True
                break
        remaining = None if budget_hit else _count_lines(f, _COUNT_REMAINING_BYTES, flag)
    if not lines and offset > 1:
        raise ToolInputError(
            f"offset {offset} is past the end of {shown}, which has {skipped:,} lines. "
            "Use a smaller offset."
        )
    last_line = offset + len(lines) - 1
    return ReadRange(
        lines=lines,
        first_line=offset,
        last_line=last_line,
        total_lines=None if remaining is None else last_line + remaining,
        sha256=digest.hexdigest(),
        mtime_ns=st.st_mtime_ns,
        size=st.st_size,
        real=opened.real,
        shown=shown,
        budget_hit=budget_hit,
    )


class ReadFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace.")
    offset: int = Field(1, ge=1, description="1-based line number to start at (default 1).")
    # Above the maximum is clamped, not refused: the model asked for "all of it".
    limit: int = Field(
        MAX_LINES,
        ge=1,
        description=f"Number of lines to read (default and maximum {MAX_LINES}).",
        json_schema_extra={"maximum": MAX_LINES},
    )


class ReadFileTool(ArgsTool[ReadFileArgs]):
    name = "read_file"
    Args = ReadFileArgs
    mutating = False
    description = (
        "Read a text file in the workspace. Returns numbered lines (like cat -n). "
        f"At most {MAX_LINES:,} lines per call and {MAX_LINE_CHARS:,} characters per line "
        "(longer lines are cut with a marker). For a large file, read a range with offset "
        "(1-based first line) and limit; when more lines remain the result says which "
        "offset to continue from. Prefer grep via run_bash to find the lines you need "
        "first. Binary files are refused. Re-reading an unchanged range whose earlier "
        "result is still in the conversation returns a short note instead of the content."
    )

    async def call(self, args: ReadFileArgs, ctx: ToolContext) -> ToolOutput:
        raw, offset, limit = args.path, args.offset, min(args.limit, MAX_LINES)
        try:
            read = await run_blocking(lambda flag: _read_range(raw, ctx, offset, limit, flag))
        except OSError as exc:
            raise _errors_to_tool_errors(raw, ctx, exc, action="read") from None
        cache = file_cache(ctx)
        key = _cache_key(read.real)
        cache.mark_read(key, read.mtime_ns, read.size)
        if not read.lines:
            return ToolOutput(f"{read.shown} is empty (0 lines).")
        content = "\n".join(read.lines)
        if read.total_lines is None or read.last_line < read.total_lines:
            of_total = "" if read.total_lines is None else f" of {read.total_lines:,}"
            budget = (
                f" (this read stopped at its {ctx.read_max_bytes:,}-byte limit)" if read.budget_hit else ""
            )
            content += (
                f"\n[Showing lines {read.first_line}-{read.last_line}{of_total}; more remain{budget}. "
                f"To continue, call read_file with offset={read.last_line + 1}.]"
            )
        return ToolOutput(
            cache.record_read(
                path=key,
                offset=offset,
                limit=limit,
                mtime_ns=read.mtime_ns,
                size=read.size,
                sha256=read.sha256,
                content=content,
                first_line=read.first_line,
                last_line=read.last_line,
                call_id=ctx.call_id,
                result_in_context=ctx.result_in_context,
            )
        )


# --- list_files --------------------------------------------------------------------


def _open_below(root_fd: int, parts: list[str]) -> int:
    """Open the directory ``parts`` below ``root_fd``, never through a symlink."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_skipped_dir(dir_fd: int, name: str) -> bool:
    if name in SKIPPED_DIRS or name.endswith(".egg-info"):
        return True
    # Virtualenvs and caches under any name mark themselves.
    try:
        child = _open_below(dir_fd, [name])
    except OSError:
        return False
    try:
        for marker in ("pyvenv.cfg", "CACHEDIR.TAG"):
            try:
                os.stat(marker, dir_fd=child, follow_symlinks=False)
                return True
            except OSError:
                pass
        return False
    finally:
        os.close(child)


def _list(root_fd: int, flag: CancelFlag) -> tuple[list[str], int, bool]:
    """Breadth-first (shallow entries make the cut first): shown, total, counting stopped.

    Every directory is reopened from the root one component at a time without
    following symlinks, so a directory swapped for a symlink is not entered.
    """
    shown: list[str] = []
    total = 0
    queue: deque[list[str]] = deque([[]])
    while queue:
        flag.check()
        parts = queue.popleft()
        try:
            fd = _open_below(root_fd, parts)
        except OSError:
            continue
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                total += 1
                rel = shown_name("/".join([*parts, entry.name]))
                if entry.is_dir(follow_symlinks=False):
                    if _is_skipped_dir(fd, entry.name):
                        line = f"{rel}/  (skipped: not listed)"
                    else:
                        line = f"{rel}/"
                        queue.append([*parts, entry.name])
                elif entry.is_symlink():
                    line = f"{rel}@"
                else:
                    line = rel
                if len(shown) < MAX_LIST_ENTRIES:
                    shown.append(line)
        except OSError:
            continue
        finally:
            os.close(fd)
        if total >= _LIST_SCAN_CAP:
            return shown, total, True
    return shown, total, False


def _list_path(raw: str, ctx: ToolContext, flag: CancelFlag) -> tuple[Located, list[str], int, bool]:
    fd, located = open_directory(raw, ctx)
    try:
        located.close()
        return (located, *_list(fd, flag))
    finally:
        os.close(fd)


class ListFilesArgs(ToolArgs):
    path: str | None = Field(None, description="Directory relative to the workspace (default: the workspace).")


class ListFilesTool(ArgsTool[ListFilesArgs]):
    name = "list_files"
    Args = ListFilesArgs
    mutating = False
    description = (
        "List files and directories under a path in the workspace, recursively "
        f"(directories end with /). At most {MAX_LIST_ENTRIES} entries, shallow ones "
        "first; the result says how many were left out. Skips .git, node_modules, "
        "__pycache__, virtualenvs, build outputs and caches (shown as skipped). List a "
        "subdirectory to see more of it."
    )

    async def call(self, args: ListFilesArgs, ctx: ToolContext) -> ToolOutput:
        raw = args.path or "."
        try:
            located, shown, total, stopped = await run_blocking(lambda flag: _list_path(raw, ctx, flag))
        except FileNotFoundError:
            raise ToolInputError(
                f"Directory not found: {shown_name(raw)}. List the workspace with list_files."
            ) from None
        except NotADirectoryError:
            raise ToolInputError(f"{shown_name(raw)} is a file, not a directory. Read it with read_file.") from None
        except OSError as exc:
            raise _errors_to_tool_errors(raw, ctx, exc, action="list") from None
        shown.sort()
        header = f"{display_path(located.real, ctx)}/ ({total:,}{'+' if stopped else ''} entries)"
        if not shown:
            return ToolOutput(f"{header}: empty directory.")
        text = header + "\n" + "\n".join(shown)
        if total > len(shown):
            left_out = f"{total - len(shown):,}{' or more' if stopped else ''}"
            text += (
                f"\n[{len(shown)} of {total:,}{'+' if stopped else ''} entries shown; {left_out} "
                "left out. List a subdirectory with list_files(path=...), or search with "
                "run_bash (find, grep -rl).]"
            )
        return ToolOutput(text)


# --- write_file / edit_file --------------------------------------------------------

# edit_file holds the whole file in memory; above this it points to other means.
_EDIT_MAX_BYTES = 64 * 1024 * 1024


def _encode(content: str) -> bytes:
    try:
        # A name or text that came from a non-UTF-8 byte round-trips to that byte.
        return content.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return content.encode("utf-8", "replace")


def _write(raw: str, ctx: ToolContext, data: bytes, flag: CancelFlag) -> tuple[OpenedFile, os.stat_result]:
    # The file as it was before this turn changed it, kept for a rewind (app/tools/file_history.py).
    history = ctx.file_history
    kept = history.before_write(raw, ctx) if history is not None else None
    written = _write_opened(raw, ctx, data, flag)
    if history is not None:
        history.wrote(kept, data)
    return written


def _write_opened(raw: str, ctx: ToolContext, data: bytes, flag: CancelFlag) -> tuple[OpenedFile, os.stat_result]:
    opened = open_file_for_writing(raw, ctx)
    try:
        view = memoryview(data)
        while view:
            flag.check()
            written = os.write(opened.fd, view[:_BLOCK])
            view = view[written:]
        return opened, os.fstat(opened.fd)
    finally:
        os.close(opened.fd)


class WriteFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace.")
    content: str = Field(description="The complete new file content.")


class WriteFileTool(ArgsTool[WriteFileArgs]):
    name = "write_file"
    Args = WriteFileArgs
    mutating = True
    description = (
        "Create a file or overwrite it completely with content (parent directories are "
        "created). To change part of an existing file use edit_file instead."
    )

    async def call(self, args: WriteFileArgs, ctx: ToolContext) -> ToolOutput:
        raw, content = args.path, args.content
        data = _encode(content)
        try:
            opened, st = await run_blocking(lambda flag: _write(raw, ctx, data, flag))
        except OSError as exc:
            raise _errors_to_tool_errors(raw, ctx, exc, action="write") from None
        cache = file_cache(ctx)
        key = _cache_key(opened)
        cache.invalidate(key)
        cache.mark_read(key, st.st_mtime_ns, st.st_size)
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        verb = "Overwrote" if opened.existed else "Created"
        return ToolOutput(f"{verb} {shown_name(raw)}: {lines:,} lines, {st.st_size:,} bytes.")


def _read_for_edit(raw: str, ctx: ToolContext, flag: CancelFlag) -> tuple[OpenedFile, bytes]:
    opened = open_file_for_reading(raw, ctx)
    with os.fdopen(opened.fd, "rb") as f:
        if opened.st.st_size > _EDIT_MAX_BYTES:
            raise ToolInputError(
                f"{opened.shown} is {opened.st.st_size:,} bytes, too large for edit_file "
                f"(at most {_EDIT_MAX_BYTES:,}). Change it with run_bash (e.g. sed -i) instead."
            )
        chunks: list[bytes] = []
        while block := f.read(_BLOCK):
            flag.check()
            chunks.append(block)
        return opened, b"".join(chunks)


class EditFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace.")
    old: str = Field(description="Exact text to replace (unique in the file).")
    new: str = Field(description="Replacement text.")


class EditFileTool(ArgsTool[EditFileArgs]):
    name = "edit_file"
    Args = EditFileArgs
    mutating = True
    description = (
        "Replace one exact piece of text in a file: old must occur exactly once "
        "(include surrounding lines to make it unique; whitespace and indentation must "
        "match, without read_file's line-number prefixes). The file must have been read "
        "with read_file in this session and not changed since; otherwise read it first."
    )

    async def call(self, args: EditFileArgs, ctx: ToolContext) -> ToolOutput:
        raw, old, new = args.path, args.old, args.new
        shown = shown_name(raw)
        if not old:
            raise ToolInputError("old is empty; give the exact text to replace (to create a file, use write_file).")
        if old == new:
            raise ToolInputError("old and new are the same; there is nothing to change.")
        try:
            opened, data = await run_blocking(lambda flag: _read_for_edit(raw, ctx, flag))
        except FileNotFoundError:
            raise ToolInputError(f"File not found: {shown}. To create a file, use write_file.") from None
        except OSError as exc:
            raise _errors_to_tool_errors(raw, ctx, exc, action="read") from None
        cache = file_cache(ctx)
        key = _cache_key(opened)
        refusal = cache.check_editable(key, opened.st.st_mtime_ns, opened.st.st_size)
        if refusal:
            raise ToolInputError(f"Refused to edit: {refusal}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolInputError(f"{shown} is not valid UTF-8 text; edit_file cannot change it.") from None
        count = text.count(old)
        if count == 0 and "\r\n" in text and "\n" in old:
            # The model saw LF lines; the file uses CRLF.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
            count = text.count(old)
        if count == 0:
            raise ToolInputError(
                f"old was not found in {shown}. Copy the exact text from a fresh read_file "
                "(whitespace and indentation must match; leave out the line-number prefixes)."
            )
        if count > 1:
            raise ToolInputError(
                f"old occurs {count} times in {shown}; it must occur exactly once. Include more "
                "surrounding lines in old to pick one occurrence."
            )
        start = text.index(old)
        line = text.count("\n", 0, start) + 1
        updated = _encode(text.replace(old, new, 1))
        try:
            written, st = await run_blocking(lambda flag: _write(raw, ctx, updated, flag))
        except OSError as exc:
            raise _errors_to_tool_errors(raw, ctx, exc, action="write") from None
        key = _cache_key(written)
        cache.invalidate(key)
        cache.mark_read(key, st.st_mtime_ns, st.st_size)
        return ToolOutput(
            f"Edited {shown}: replaced 1 occurrence at line {line} "
            f"({old.count(chr(10)) + 1} line(s) -> {new.count(chr(10)) + 1} line(s))."
        )
