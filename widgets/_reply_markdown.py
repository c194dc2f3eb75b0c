"""Markdown of a streamed reply as lines: segments, top-level blocks, and Rich rendering.

Pure logic for ``widgets/assistant_message.py`` (no widget here):

- ``cut_point`` / ``fence_reopening``: where a reply's text is cut into segments, and
  how a code block cut in two is closed and opened again;
- ``parse_blocks``: a segment's top-level Markdown blocks (a paragraph, a list, a
  code block, a table ...), each with its source and its markdown-it tokens;
- ``render_block``: one block as Rich renders it, as lines (``Strip``) at a width,
  in a ``ReplyLook`` (the colours the widget takes from the Textual theme);
- ``estimate_height``: how many lines a block will take at a width, without rendering
  it (the widget lays out a long reply at a new width with these, and renders the
  blocks in view at once and the others a few at a time).

A block is rendered from the tokens the split already produced (Rich's own
``Markdown`` would parse the text a second time, and builds a parser per call).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import ClassVar

from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import CodeBlock, Heading, Markdown, MarkdownElement
from rich.style import Style
from rich.syntax import Syntax
from rich.text import Text
from rich.theme import Theme
from textual.strip import Strip

SEGMENT_CHARS = 4_000  # a segment ends at the first blank line (outside code) past this
FORCE_CHARS = 8_000  # ... or at a line or word break past this (one very long paragraph)
# ... or right there, past this with no break at all (a run of one character, base64, stand-ins
# for control characters): a segment without an end was parsed again whole on every flush.
HARD_CHARS = 2 * FORCE_CHARS
# A code block is cut sooner: highlighting is the costliest rendering per character, and the
# block being written is rendered again on every flush.
FENCE_SPLIT_CHARS = 2_400

# The parser Rich's Markdown uses (CommonMark, tables, strikethrough): the tokens go to Rich as they are.
_PARSER = MarkdownIt("commonmark").enable("strikethrough").enable("table")


def _blank_line_cut(fragment: str, start: int, fence_open: bool, limit: int) -> int | None:
    """The first blank line outside code fences at or after ``start`` (and before ``limit``)."""
    fences = fence_open
    position = 0
    while True:
        index = fragment.find("\n\n", start, limit + 2)
        if index < 0:
            return None
        fences ^= fragment.count("```", position, index) % 2 == 1
        position = index
        if not fences:
            return index + 2
        start = index + 2


def cut_point(segment_chars: int, fence_open: bool, fragment: str) -> int | None:
    """Where to end the current segment within ``fragment`` (None: it all fits).

    At a blank line outside code blocks once the segment passes SEGMENT_CHARS;
    inside a code block once the segment passes FENCE_SPLIT_CHARS, at a line end
    (the caller closes the block and reopens it); past FORCE_CHARS at a line or
    word break; past HARD_CHARS wherever it is.
    """
    room = SEGMENT_CHARS - segment_chars
    if len(fragment) <= room and segment_chars + len(fragment) <= FENCE_SPLIT_CHARS:
        return None
    force = max(0, FORCE_CHARS - segment_chars)
    split = max(0, FENCE_SPLIT_CHARS - segment_chars)
    hard = max(split, HARD_CHARS - segment_chars)
    if len(fragment) > split and fence_open ^ (fragment.count("```", 0, split) % 2 == 1):
        # in a code block at the split point: cut at the next line end unless it closes first
        index = fragment.find("\n", split, hard)
        closes = fragment.find("```", split, index if index >= 0 else len(fragment))
        if index >= 0 and closes < 0:
            return index + 1
    if len(fragment) <= room:
        return None
    blank = _blank_line_cut(fragment, max(0, room), fence_open, force)
    if blank is not None:
        return blank
    if segment_chars + len(fragment) <= FORCE_CHARS:
        return None
    for separator in ("\n", " "):
        index = fragment.find(separator, force, hard)
        if index >= 0:
            return index + 1
    return hard if len(fragment) > hard else None


_FENCE = re.compile(r"[ \t]*`{3,}")


def fence_reopening(segment_text: str) -> tuple[str, str]:
    """(closing line, opening line) for the code block left open at the end of ``segment_text``."""
    mark = segment_text.rfind("```")
    start = segment_text.rfind("\n", 0, mark) + 1
    end = segment_text.find("\n", mark)
    opening = segment_text[start : end if end >= 0 else len(segment_text)]
    fence = _FENCE.match(opening)
    closing = fence.group(0) if fence else "```"
    return closing + "\n", opening + "\n"


@dataclass(frozen=True)
class ReplyLook:
    """The colours a reply is rendered in: Rich's ``markdown.*`` styles and a code theme.

    Rich's defaults (inline code cyan on black, magenta headings) ignore the dashboard's
    theme; the widget builds one of these from its CSS, so a light theme gets light code."""

    styles: dict[str, Style] = field(default_factory=dict)  # Rich style names, e.g. "markdown.code"
    code_theme: str = "monokai"  # a Pygments style for code blocks

    @cached_property
    def rich_theme(self) -> Theme:
        return Theme(self.styles, inherit=False)


@dataclass
class ReplyBlock:
    """One top-level block of a reply, and its lines once rendered at ``width``."""

    source: str
    tokens: list[Token]
    joined: bool = False  # continues the block above (a code block cut in two): no blank line between
    width: int = 0
    lines: list[Strip] = field(default_factory=list)
    look: ReplyLook | None = None  # the look ``lines`` were rendered in (a new theme renders them again)


def parse_blocks(source: str, continues_code: bool = False) -> list[ReplyBlock]:
    """The top-level blocks of ``source``. ``continues_code``: it opens with a code block
    reopened after a cut, drawn joined to the block above."""
    tokens = _PARSER.parse(source)
    lines = source.splitlines(keepends=True)
    blocks: list[ReplyBlock] = []
    opened = 0
    for index, token in enumerate(tokens):
        if token.level != 0:
            continue
        if token.nesting == 1:
            opened = index
            continue
        first = token if token.nesting == 0 else tokens[opened]
        start, end = first.map or (0, 0)
        block_tokens = [token] if token.nesting == 0 else tokens[opened : index + 1]
        blocks.append(ReplyBlock("".join(lines[start:end]), block_tokens))
    if blocks and continues_code and blocks[0].tokens[0].type == "fence":
        blocks[0].joined = True
    return blocks


class _LeftHeading(Heading):
    """Headings left-aligned, as in the rest of the dashboard (Rich centres ``#``)."""

    LEVEL_ALIGN: ClassVar[dict[str, str]] = {f"h{level}": "left" for level in range(1, 7)}  # type: ignore[assignment]


# Code blocks highlighted lately, by (code, lexer, theme): a block is rendered again at each new
# width and each flush while it streams, and lexing it again was three quarters of the time spent
# highlighting (the wrapping at the width is done after, on a copy). Each is at most a segment of
# code (FENCE_SPLIT_CHARS and a line), so the cache stays a few hundred kilobytes.
HIGHLIGHTED_BLOCKS = 64


@lru_cache(maxsize=HIGHLIGHTED_BLOCKS)
def _highlighted(code: str, lexer_name: str, theme: str) -> Text:
    return Syntax(code, lexer_name, theme=theme, word_wrap=True).highlight(code)


class _CodeSyntax(Syntax):
    """Rich's Syntax with the highlighting of recent code blocks kept (``_highlighted``)."""

    def __init__(self, code: str, lexer_name: str, theme: str) -> None:
        super().__init__(code, lexer_name, theme=theme, word_wrap=True, padding=(0, 1))
        self._names = (lexer_name, theme)

    def highlight(self, code: str, line_range: tuple[int | None, int | None] | None = None) -> Text:
        if line_range is not None:
            return super().highlight(code, line_range)
        return _highlighted(code, *self._names).copy()  # a copy: Rich trims the text it is given


class _CodeBlock(CodeBlock):
    """Highlighted code without blank padding rows: a block cut in two reads as one."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield _CodeSyntax(str(self.text).rstrip(), self.lexer_name, self.theme)


class _BlockMarkdown(Markdown):
    """Rich's Markdown over tokens already parsed (one block's)."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "heading_open": _LeftHeading,
        "fence": _CodeBlock,
        "code_block": _CodeBlock,
    }

    def __init__(self, tokens: list[Token], code_theme: str) -> None:  # noqa: D107  (no super().__init__: it parses)
        self.markup = ""
        self.parsed = tokens
        self.code_theme = code_theme
        self.justify = None
        self.style = "none"
        self.hyperlinks = False  # links as "text (url)": the conversation does not open them
        self.inline_code_lexer = None
        self.inline_code_theme = code_theme


def render_block(console: Console, block: ReplyBlock, width: int, look: ReplyLook | None = None) -> None:
    """Render the block's lines at ``width`` onto it (``block.lines``, ``block.width``)."""
    look = look or ReplyLook()
    options = console.options.update(width=width, highlight=False, height=None)
    console.push_theme(look.rich_theme)  # (the App's console: popped before anything else renders)
    try:
        rendered = console.render_lines(_BlockMarkdown(block.tokens, look.code_theme), options,
                                        pad=False, new_lines=False)
    finally:
        console.pop_theme()
    # Rich opens a list or a quote with an empty line and frames a table with blank rows:
    # the spacing between blocks is the widget's (one blank line).
    blank = [not "".join(segment.text for segment in line).strip() for line in rendered]
    first = blank.index(False) if False in blank else len(rendered)
    last = len(rendered) - blank[::-1].index(False) if False in blank else first
    block.lines = [Strip(line) for line in rendered[first:last]]
    block.width = width
    block.look = look


_CODE_TOKENS = ("fence", "code_block")


def estimate_height(block: ReplyBlock, width: int) -> int:
    """How many lines ``block`` takes at ``width``, without rendering it.

    Exact if it is rendered at that width. A table keeps the rows it was rendered with
    (its cells seldom wrap); anything else is counted from its source, each line wrapped
    on its own at the width (code less its padding): prose from a model is a line per
    paragraph or list item, so this is within a line or two of what Rich draws.
    """
    if block.width == width:
        return len(block.lines)
    first = block.tokens[0]
    if first.type == "table_open" and block.lines:
        return len(block.lines)
    if first.type in _CODE_TOKENS:
        text, room = first.content.rstrip(), width - 2
    else:
        text, room = block.source.strip(), width
    room = max(1, room)
    return max(1, sum(max(1, -(-len(line) // room)) for line in text.splitlines()))
