"""What the demo's scripted sub-agent makes of the files it read: where an importer rejects rows.

In the "delegate" scenario the sub-agent reads the importer and the module it
calls to validate a row with the real ``read_file`` tool; this module turns those
numbered listings into its report. Every line number and message in the report
comes from the text it read, never from a table here, so an edited project file
gives a report that matches the edit (and a file it did not read is never cited).

It reads Python the way a careful model skims it: top-level ``def``/``class``
blocks, ``from X import a, b`` lines, ``raise Error(...)`` lines and the ``try``
bodies they guard. That is enough for the demo project's importer; it is not a
parser and does not pretend to be one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$")  # read_file's "cat -n" lines
_BLOCK = re.compile(r"^(?:async\s+)?(def|class)\s+(\w+)")
_FROM_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+(.+)$")
_FIELD = re.compile(r"\bfield=(?:\"(\w+)\"|'(\w+)')")
_LITERAL_MESSAGE = re.compile(r"\(\s*f?(\"[^\"]*\"|'[^']*')")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_DOCSTRING = re.compile(r'^\s*"""(.+?)"""\s*$')


@dataclass(frozen=True)
class SourceFile:
    """A file as read_file showed it: its path and its numbered lines."""

    path: str
    lines: dict[int, str]

    @classmethod
    def from_read(cls, path: str, result: str) -> SourceFile:
        numbered = {}
        for row in result.splitlines():
            match = _NUMBERED.match(row)
            if match:
                numbered[int(match.group(1))] = match.group(2)
        return cls(path, numbered)

    def blocks(self) -> dict[str, tuple[int, int]]:
        """Top-level ``def``/``class`` name -> (first line, last non-blank line)."""
        starts = [(n, m.group(2)) for n, text in sorted(self.lines.items()) if (m := _BLOCK.match(text))]
        top = [n for n, text in sorted(self.lines.items())
               if text.strip() and not text[0].isspace() and not text.startswith((")", "]", "}", "@", "#"))]
        found: dict[str, tuple[int, int]] = {}
        for first, name in starts:
            after = [n for n in top if n > first]
            end = after[0] - 1 if after else max(self.lines)
            while end > first and not self.lines.get(end, "").strip():
                end -= 1
            found[name] = (first, end)
        return found

    def imports(self) -> dict[str, str]:
        """Name -> the module file it comes from, for ``from pkg.mod import a, b`` lines."""
        names: dict[str, str] = {}
        for text in self.lines.values():
            match = _FROM_IMPORT.match(text.strip())
            if not match or "." not in match.group(1) or match.group(1) == "__future__":
                continue
            module_file = match.group(1).replace(".", "/") + ".py"
            for name in match.group(2).strip("()").split(","):
                name = name.split(" as ")[-1].strip()
                if name:
                    names[name] = module_file
        return names

    def span(self, first: int, last: int) -> list[tuple[int, str]]:
        return [(n, self.lines[n]) for n in range(first, last + 1) if n in self.lines]


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _message(text: str) -> str | None:
    """The literal message of ``raise Error("...")``, its placeholders shown as "…"."""
    match = _LITERAL_MESSAGE.search(text)
    if not match:
        return None
    return _PLACEHOLDER.sub("…", match.group(1)[1:-1])


def _field(text: str) -> str | None:
    match = _FIELD.search(text)
    return (match.group(1) or match.group(2)) if match else None


@dataclass
class Rejection:
    """One ``raise`` in the rejecting function."""

    line: int
    column: str | None  # the field= it names (a CSV column)
    message: str | None  # None: it passes on what a callee raised
    callees: list[str] = field(default_factory=list)  # imported names its ``try`` body calls


def _guarded_callees(source: SourceFile, raise_line: int, first: int, imports: dict[str, str],
                     error: str) -> list[str]:
    """Imported names called in the ``try`` body whose ``except`` holds ``raise_line``."""
    depth = _indent(source.lines[raise_line])
    handler = None
    for n in range(raise_line - 1, first, -1):
        text = source.lines.get(n, "")
        if text.strip() and _indent(text) < depth:
            handler = n if text.strip().startswith("except") else None
            break
    if handler is None:
        return []
    depth = _indent(source.lines[handler])
    start = next((n for n in range(handler - 1, first, -1)
                  if source.lines.get(n, "").strip() == "try:" and _indent(source.lines[n]) == depth), None)
    if start is None:
        return []
    body = " ".join(text for _n, text in source.span(start + 1, handler - 1))
    return [name for name in imports if name != error and re.search(rf"\b{re.escape(name)}\s*[.(]", body)]


@dataclass
class Findings:
    """What the sub-agent found in the importer (and what it should read next)."""

    importer: SourceFile
    error: str  # the exception class the rejections raise
    function: str  # the function that rejects a row
    extent: tuple[int, int]
    rejections: list[Rejection]
    imports: dict[str, str]

    def modules_to_follow(self) -> list[str]:
        """The module files of the names the rejecting checks call, in order of first use."""
        order: list[str] = []
        for rejection in self.rejections:
            for name in rejection.callees:
                module = self.imports[name]
                if module not in order:
                    order.append(module)
        return order


def find_rejections(importer: SourceFile) -> Findings | None:
    """The top-level function with the most ``raise <Error>(`` lines, and each of them."""
    imports = importer.imports()
    blocks = importer.blocks()
    best: tuple[int, str, str] | None = None  # (count, function, error class)
    for name, (first, last) in blocks.items():
        raised = [m.group(1) for _n, text in importer.span(first, last)
                  if (m := re.search(r"\braise\s+(\w+)\(", text))]
        if not raised:
            continue
        error = max(set(raised), key=raised.count)
        if best is None or raised.count(error) > best[0]:
            best = (raised.count(error), name, error)
    if best is None:
        return None
    _count, function, error = best
    first, last = blocks[function]
    rejections = []
    for n, text in importer.span(first, last):
        if re.search(rf"\braise\s+{re.escape(error)}\(", text):
            rejections.append(Rejection(n, _field(text), _message(text),
                                        _guarded_callees(importer, n, first, imports, error)))
    return Findings(importer, error, function, (first, last), rejections, imports)


def _raises_in(module: SourceFile, name: str, error: str) -> list[tuple[int, str]]:
    """(line, message) of each ``raise <error>("...")`` inside top-level ``name`` of ``module``."""
    extent = module.blocks().get(name)
    if extent is None:
        return []
    return [(n, _message(text) or "") for n, text in module.span(*extent)
            if re.search(rf"\braise\s+{re.escape(error)}\(", text)]


def _lines(numbers: list[int]) -> str:
    return ("line " if len(numbers) == 1 else "lines ") + ", ".join(str(n) for n in numbers)


def _callers(source: SourceFile, function: str) -> list[tuple[str, int]]:
    """(top-level block, line) of each call of ``function`` in ``source``."""
    found = []
    for name, (first, last) in source.blocks().items():
        if name == function:
            continue
        for n, text in source.span(first + 1, last):
            if re.search(rf"\b{re.escape(function)}\(", text):
                found.append((name, n))
    return found


def _what_happens_next(findings: Findings) -> list[str]:
    """The callers' part: where a rejected row is collected and what the import then does."""
    source, error = findings.importer, findings.error
    blocks = source.blocks()
    sentences = []
    for caller, call_line in _callers(source, findings.function)[:1]:
        first, last = blocks[caller]
        collected = next((n for n, text in source.span(call_line, last) if ".append(exc)" in text), None)
        whole = [(n, _message(text)) for n, text in source.span(first, last)
                 if n != call_line and re.search(rf"\b{re.escape(error)}\(", text)]
        if collected:
            sentences.append(f"`{caller}` collects each rejected row at line {collected} "
                             f"(`{source.lines[collected].strip()}`) and goes on with the next row.")
        for n, message in whole[:1]:
            sentences.append(f"It rejects the whole file at line {n}: \"{message}\"." if message
                             else f"It rejects the whole file at line {n}.")
        for outer, outer_line in _callers(source, caller)[:1]:
            names = re.findall(r"\w+", source.lines[outer_line].split("=", 1)[0]) if "=" in source.lines[outer_line] else []
            outer_first, outer_last = blocks[outer]
            stop = next((n for n, text in source.span(outer_line + 1, outer_last)
                         if (m := re.match(r"\s*if (\w+):\s*$", text)) and m.group(1) in names
                         and source.lines.get(n + 1, "").strip().startswith("return")), None)
            doc = next((m.group(1) for _n, text in source.span(outer_first + 1, outer_first + 2)
                        if (m := _DOCSTRING.match(text))), None)
            if stop is not None:
                said = f" (its docstring: \"{doc}\")" if doc else ""
                sentences.append(f"`{outer}` returns at lines {stop}–{stop + 1} before writing anything when any "
                                 f"row was rejected{said}.")
    return sentences


def rejection_report(findings: Findings, followed: dict[str, SourceFile]) -> str:
    """The sub-agent's report: the rejecting function, each check with its line, and what follows."""
    source = findings.importer
    first, last = findings.extent
    lines = [f"Rows are rejected in `{source.path}`, by `{findings.function}` (lines {first}–{last}): "
             f"each check raises `{findings.error}` with the row number."]
    for rejection in findings.rejections:
        label = f"line {rejection.line}" + (f" ({rejection.column})" if rejection.column else "")
        inner: list[tuple[str, list[tuple[int, str]]]] = []
        for name in rejection.callees:
            module = followed.get(findings.imports[name])
            if module is not None:
                inner.append((name, _raises_in(module, name, findings.error)))
        raised = [(n, message) for _name, found in inner for n, message in found]
        if rejection.message is not None and not raised:
            lines.append(f"- {label}: \"{rejection.message}\"")
        elif inner:
            names = " and ".join(f"`{name}`" for name, _found in inner)
            path = findings.imports[inner[0][0]]
            messages = "; ".join(f"\"{message}\"" for _n, message in raised if message)
            where = f" — `{path}` {_lines([n for n, _m in raised])}" if raised else ""
            verb = "refuses" if len(inner) == 1 else "refuse"
            lines.append(f"- {label}: what {names} {verb}{where}" + (f": {messages}" if messages else ""))
        else:
            lines.append(f"- {label}: passes on what the code it calls raised")
    lines += ["", *_what_happens_next(findings)]
    return "\n".join(lines).strip()
