"""File tools: read_file, list_files, write_file, edit_file.

Each bounds its own output (2,000 lines of 2,000 characters; 500 entries)
because the best truncation is not reading that much in the first place; the
registry's head+tail truncation is the backstop.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from app.context.file_cache import FileReadCache
from app.messages import ToolSpec
from app.tools.base import ToolContext, ToolInputError, ToolOutput
from app.tools.workspace import display_path, int_arg, resolve_path, str_arg

MAX_LINES = 2_000
MAX_LINE_CHARS = 2_000
MAX_LIST_ENTRIES = 500
BINARY_SNIFF_BYTES = 8_192
# Counting the lines after the range stops here (a multi-GB file says "more").
_COUNT_REMAINING_BYTES = 64 * 1024 * 1024
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
    return ctx.file_cache


def _missing_or_directory(path: Path, raw: str, ctx: ToolContext) -> None:
    if not path.exists():
        raise ToolInputError(
            f"File not found: {raw}. Paths are relative to the workspace "
            f"{ctx.workspace}; check what exists with list_files."
        )
    if path.is_dir():
        raise ToolInputError(f"{raw} is a directory, not a file. Use list_files to see inside it.")


# --- read_file ---------------------------------------------------------------------


@dataclass
class _ReadRange:
    lines: list[str]  # formatted, line-numbered
    first_line: int
    last_line: int
    total_lines: int | None  # None: more than could be counted cheaply
    sha256: str
    mtime_ns: int
    size: int


def _skip_lines(f: IO[bytes], count: int) -> int:
    """Move past ``count`` lines by counting newlines in blocks; returns lines skipped."""
    skipped = 0
    while skipped < count:
        start = f.tell()
        block = f.read(_BLOCK)
        if not block:
            return skipped
        newlines = block.count(b"\n")
        if skipped + newlines < count:
            skipped += newlines
            continue
        pos = -1
        for _ in range(count - skipped):
            pos = block.index(b"\n", pos + 1)
        f.seek(start + pos + 1)
        return count
    return skipped


def _count_lines(f: IO[bytes], budget: int) -> int | None:
    """Lines left from the current position, or None when over ``budget`` bytes."""
    lines, read, last = 0, 0, b"\n"
    while block := f.read(_BLOCK):
        lines += block.count(b"\n")
        read += len(block)
        last = block[-1:]
        if read > budget:
            return None
    return lines + (0 if last == b"\n" else 1)


def _read_line(f: IO[bytes], digest: Any) -> tuple[str, int] | None:
    """One line: its first MAX_LINE_CHARS characters and its full length in characters.

    A line longer than that is consumed in chunks, so a single 10 MB line does not
    have to sit in memory.
    """
    head = f.readline(_LINE_HEAD_BYTES)
    if not head:
        return None
    digest.update(head)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(head)
    length = len(text)
    while not head.endswith(b"\n"):
        head = f.readline(_BLOCK)
        if not head:
            break
        digest.update(head)
        length += len(decoder.decode(head))
    length += len(decoder.decode(b"", final=True))
    text = text[: MAX_LINE_CHARS + 2].rstrip("\n").removesuffix("\r")
    length -= 1 if head.endswith(b"\n") else 0
    return text, length


def _read_range(path: Path, raw: str, offset: int, limit: int) -> _ReadRange:
    st = path.stat()
    with open(path, "rb") as f:
        if b"\0" in f.read(BINARY_SNIFF_BYTES):
            raise ToolInputError(
                f"{raw} looks like a binary file ({st.st_size:,} bytes with NUL bytes); "
                "read_file shows text only. To inspect it use run_bash, e.g. "
                f"`file {raw}` or `xxd {raw} | head -50`."
            )
        f.seek(0)
        skipped = _skip_lines(f, offset - 1)
        digest = hashlib.sha256()
        lines: list[str] = []
        while len(lines) < limit and (line := _read_line(f, digest)) is not None:
            text, length = line
            number = offset + len(lines)
            if length > MAX_LINE_CHARS:
                text = (
                    f"{text[:MAX_LINE_CHARS]} … [line cut at {MAX_LINE_CHARS:,} of "
                    f"{length:,} characters; see the rest with run_bash, e.g. "
                    f"`sed -n {number}p {raw} | cut -c {MAX_LINE_CHARS + 1}-{MAX_LINE_CHARS * 3}`]"
                )
            lines.append(f"{number:>6}\t{text}")
        remaining = _count_lines(f, _COUNT_REMAINING_BYTES)
    if not lines and offset > 1:
        raise ToolInputError(
            f"offset {offset} is past the end of {raw}, which has {skipped:,} lines. "
            "Use a smaller offset."
        )
    last_line = offset + len(lines) - 1
    return _ReadRange(
        lines=lines,
        first_line=offset,
        last_line=last_line,
        total_lines=None if remaining is None else last_line + remaining,
        sha256=digest.hexdigest(),
        mtime_ns=st.st_mtime_ns,
        size=st.st_size,
    )


class ReadFileTool:
    mutating = False
    spec = ToolSpec(
        name="read_file",
        description=(
            "Read a text file in the workspace. Returns numbered lines (like cat -n). "
            f"At most {MAX_LINES:,} lines per call and {MAX_LINE_CHARS:,} characters per line "
            "(longer lines are cut with a marker). For a large file, read a range with offset "
            "(1-based first line) and limit; when more lines remain the result says which "
            "offset to continue from. Prefer grep via run_bash to find the lines you need "
            "first. Binary files are refused. Re-reading an unchanged range whose earlier "
            "result is still in the conversation returns a short note instead of the content."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "1-based line number to start at (default 1).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LINES,
                    "description": f"Number of lines to read (default and maximum {MAX_LINES}).",
                },
            },
            "required": ["path"],
        },
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = str_arg(args, "path")
        offset = int_arg(args, "offset", 1)
        limit = min(int_arg(args, "limit", MAX_LINES), MAX_LINES)
        path = resolve_path(raw, ctx)
        _missing_or_directory(path, raw, ctx)
        read = await asyncio.to_thread(_read_range, path, raw, offset, limit)
        cache = file_cache(ctx)
        cache.mark_read(path, read.mtime_ns, read.size)
        if not read.lines:
            return ToolOutput(f"{raw} is empty (0 lines).")
        content = "\n".join(read.lines)
        if read.total_lines is None or read.last_line < read.total_lines:
            of_total = "" if read.total_lines is None else f" of {read.total_lines:,}"
            content += (
                f"\n[Showing lines {read.first_line}-{read.last_line}{of_total}; more remain. "
                f"To continue, call read_file with offset={read.last_line + 1}.]"
            )
        return ToolOutput(
            cache.record_read(
                path=path,
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


def _is_skipped_dir(entry: os.DirEntry[str]) -> bool:
    name = entry.name
    if name in SKIPPED_DIRS or name.endswith(".egg-info"):
        return True
    # Virtualenvs and caches under any name mark themselves.
    return os.path.exists(os.path.join(entry.path, "pyvenv.cfg")) or os.path.exists(
        os.path.join(entry.path, "CACHEDIR.TAG")
    )


def _list(root: Path) -> tuple[list[str], int, bool]:
    """Breadth-first (shallow entries make the cut first): shown, total, counting stopped."""
    shown: list[str] = []
    total = 0
    queue: deque[Path] = deque([root])
    while queue:
        directory = queue.popleft()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            total += 1
            rel = os.path.relpath(entry.path, root)
            if entry.is_dir(follow_symlinks=False):
                if _is_skipped_dir(entry):
                    line = f"{rel}/  (skipped: not listed)"
                else:
                    line = f"{rel}/"
                    queue.append(Path(entry.path))
            elif entry.is_symlink():
                line = f"{rel}@"
            else:
                line = rel
            if len(shown) < MAX_LIST_ENTRIES:
                shown.append(line)
        if total >= _LIST_SCAN_CAP:
            return shown, total, True
    return shown, total, False


class ListFilesTool:
    mutating = False
    spec = ToolSpec(
        name="list_files",
        description=(
            "List files and directories under a path in the workspace, recursively "
            f"(directories end with /). At most {MAX_LIST_ENTRIES} entries, shallow ones "
            "first; the result says how many were left out. Skips .git, node_modules, "
            "__pycache__, virtualenvs, build outputs and caches (shown as skipped). List a "
            "subdirectory to see more of it."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Directory relative to the workspace (default: the workspace).",
                }
            },
        },
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = args.get("path") or "."
        if not isinstance(raw, str):
            raise ToolInputError("path must be a string.")
        root = resolve_path(raw, ctx)
        if not root.exists():
            raise ToolInputError(f"Directory not found: {raw}. List the workspace with list_files.")
        if not root.is_dir():
            raise ToolInputError(f"{raw} is a file, not a directory. Read it with read_file.")
        shown, total, stopped = await asyncio.to_thread(_list, root)
        shown.sort()
        header = f"{display_path(root, ctx)}/ ({total:,}{'+' if stopped else ''} entries)"
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


def _write_text(path: Path, content: str) -> os.stat_result:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(content)
    return path.stat()


class WriteFileTool:
    mutating = True
    spec = ToolSpec(
        name="write_file",
        description=(
            "Create a file or overwrite it completely with content (parent directories are "
            "created). To change part of an existing file use edit_file instead."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "content": {"type": "string", "description": "The complete new file content."},
            },
            "required": ["path", "content"],
        },
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = str_arg(args, "path")
        content = str_arg(args, "content")
        path = resolve_path(raw, ctx)
        if path.is_dir():
            raise ToolInputError(f"{raw} is a directory; give a file path.")
        existed = path.exists()
        st = await asyncio.to_thread(_write_text, path, content)
        cache = file_cache(ctx)
        cache.invalidate(path)
        cache.mark_read(path, st.st_mtime_ns, st.st_size)
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        verb = "Overwrote" if existed else "Created"
        return ToolOutput(f"{verb} {raw}: {lines:,} lines, {st.st_size:,} bytes.")


class EditFileTool:
    mutating = True
    spec = ToolSpec(
        name="edit_file",
        description=(
            "Replace one exact piece of text in a file: old must occur exactly once "
            "(include surrounding lines to make it unique; whitespace and indentation must "
            "match, without read_file's line-number prefixes). The file must have been read "
            "with read_file in this session and not changed since; otherwise read it first."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "old": {"type": "string", "description": "Exact text to replace (unique in the file)."},
                "new": {"type": "string", "description": "Replacement text."},
            },
            "required": ["path", "old", "new"],
        },
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = str_arg(args, "path")
        old = str_arg(args, "old")
        new = str_arg(args, "new")
        if not old:
            raise ToolInputError("old is empty; give the exact text to replace (to create a file, use write_file).")
        if old == new:
            raise ToolInputError("old and new are the same; there is nothing to change.")
        path = resolve_path(raw, ctx)
        if not path.exists():
            raise ToolInputError(f"File not found: {raw}. To create a file, use write_file.")
        _missing_or_directory(path, raw, ctx)
        cache = file_cache(ctx)
        refusal = cache.check_editable(path)
        if refusal:
            raise ToolInputError(f"Refused to edit: {refusal}")
        try:
            with open(path, encoding="utf-8", newline="") as f:
                text = f.read()
        except UnicodeDecodeError:
            raise ToolInputError(f"{raw} is not valid UTF-8 text; edit_file cannot change it.") from None
        count = text.count(old)
        if count == 0 and "\r\n" in text and "\n" in old:
            # The model saw LF lines; the file uses CRLF.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
            count = text.count(old)
        if count == 0:
            raise ToolInputError(
                f"old was not found in {raw}. Copy the exact text from a fresh read_file "
                "(whitespace and indentation must match; leave out the line-number prefixes)."
            )
        if count > 1:
            raise ToolInputError(
                f"old occurs {count} times in {raw}; it must occur exactly once. Include more "
                "surrounding lines in old to pick one occurrence."
            )
        start = text.index(old)
        line = text.count("\n", 0, start) + 1
        st = await asyncio.to_thread(_write_text, path, text.replace(old, new, 1))
        cache.invalidate(path)
        cache.mark_read(path, st.st_mtime_ns, st.st_size)
        return ToolOutput(
            f"Edited {raw}: replaced 1 occurrence at line {line} "
            f"({old.count(chr(10)) + 1} line(s) -> {new.count(chr(10)) + 1} line(s))."
        )
