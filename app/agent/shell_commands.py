"""A command line as bash reads it, for the permission rules (``permissions.py``).

The line is parsed with a real bash grammar (tree-sitter-bash), never a scanner of our own:
a scanner that disagrees with bash about a quote inside a comment, ``$'\\''`` or a heredoc lets
a prefix rule allow whatever bash then runs. Two readings come out of one parse:

- **what a pattern rule may allow** (``CommandLine.simple``): set only when every node of the
  line is one we read completely: simple commands of literal words (plain words, ``'…'``,
  ``"…"`` without expansions) joined by ``&&``, ``||``, ``;`` and ``|``, and redirects only to
  ``/dev/null`` or onto a numbered fd (``2>&1``). Anything else (a comment, a substitution,
  an expansion, a heredoc, ``$'…'``, a subshell, a function, ``VAR=x cmd``, ``&``, ``|&``, a
  glob, a backslash, a character outside a word or a quote) leaves it None: the line asks.
- **what a deny rule looks at** (``CommandLine.everything``): every simple command anywhere in
  the tree (inside substitutions, subshells, functions, heredoc bodies), the command a wrapper
  runs (``env``, ``sudo``, ``timeout 1``, ``xargs``, ``find -exec`` …), the commands of a
  ``bash -c``/``sh -c``/``eval``/``trap`` string parsed again (bounded depth), with a command
  name's quotes and backslashes removed and its folder dropped (``/bin/rm``, ``\\rm``,
  ``'rm'`` are ``rm``). A word whose value cannot be read (``$X``, a glob) is None, and a deny
  rule matches it; a line that does not parse sets ``unreadable`` and matches every deny rule.

The parser (its import takes tens of milliseconds) is loaded on the first command checked, not at
start: a headless run that checks no command never pays for it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

# A command line longer, or nested deeper, than this is not read (so never allowed by a pattern
# and matching every deny rule): a model's command cannot make the checker slow.
MAX_COMMAND_CHARS = 64 * 1024
MAX_NESTING = 16
# Nodes of the tree read for one line, re-reads of bash -c and eval strings included (a typical
# command has fewer than 100; walking 20,000 takes well under a second).
MAX_NODES = 20_000

Words = tuple[str | None, ...]  # a simple command's words; None: a value that cannot be read literally

# Commands that run the command given in their arguments: a prefix rule never allows them, and
# a deny rule looks at what they run (every later word that is not an option may start it).
WRAPPERS = frozenset({"env", "command", "builtin", "exec", "sudo", "doas", "xargs", "nice", "ionice", "timeout",
                      "nohup", "time", "coproc", "setsid", "stdbuf", "chroot", "unshare", "nsenter", "chrt",
                      "taskset", "flock", "runuser", "busybox", "strace", "ltrace", "caffeinate", "firejail",
                      # hash -p /bin/rm ls: what a later "ls" runs
                      "hash"})
# Shells: ``-c`` takes a script; without it they run a file or their input.
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "su"})
# Builtins whose arguments are a script (eval's joined, trap's action, watch's via sh -c).
SCRIPT_ARGUMENTS = frozenset({"eval", "trap", "watch"})
# Run a file: nothing to read, and never allowed by a prefix rule.
RUNS_A_FILE = frozenset({"source", "."})
RUNS_OTHERS = WRAPPERS | SHELLS | SCRIPT_ARGUMENTS | RUNS_A_FILE
_FIND_RUNS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

# A plain word whose value is its text (a # inside a word is not a comment): no glob (* ? [),
# brace, tilde, $, backslash, quote or operator character, nothing outside printable ASCII.
_LITERAL_WORD = re.compile(r"[A-Za-z0-9_\-./,:=+@%^][A-Za-z0-9_\-./,:=+@%^#]*")
_FD_NUMBER = re.compile(r"[0-9]+")
_TO_DEV_NULL = frozenset({">", ">>", "&>", "&>>", ">|", "<", ">&"})
_FD_DUPLICATION = frozenset({">&", "<&"})
_JOINS = {"program": frozenset({";"}), "list": frozenset({"&&", "||"}), "pipeline": frozenset({"|"})}
# What is between two tokens bash splits on: spaces, tabs, newlines (a backslash-newline is
# not: bash joins the words around it, tree-sitter does not).
_GAP = re.compile(rb"[ \t\n]*")


@dataclass(frozen=True)
class CommandLine:
    """One command line, read for the permission rules (see the module's docstring)."""

    simple: tuple[tuple[str, ...], ...] | None  # the simple commands, when a pattern rule may allow the line
    # every command it may run, for deny and ask rules: (words, start), the command words[start]
    # with the words after it
    everything: tuple[tuple[Words, int], ...]
    unreadable: str | None = None  # why the line could not be read (then every deny rule matches it)


@lru_cache(maxsize=1)
def _parser() -> "Parser":
    # The grammar loads on the first check: a session that checks no command never pays for it.
    from tree_sitter import Language, Parser
    import tree_sitter_bash

    return Parser(Language(tree_sitter_bash.language()))


def read_command_line(command: str) -> CommandLine:
    """The line as bash reads it (cached: the approval dialog and the loop ask about the same line)."""
    return _read_cached(command)


@lru_cache(maxsize=64)
def _read_cached(command: str) -> CommandLine:
    if len(command) > MAX_COMMAND_CHARS:
        return CommandLine(None, (), f"longer than {MAX_COMMAND_CHARS // 1024} KiB")
    reader = _DenyReader()
    root = reader.read(command, 0)
    # bash removes a backslash-newline before it splits words (r\⏎m is rm); tree-sitter does not,
    # so the line is read both ways for deny rules
    if "\\\n" in command:
        reader.read(command.replace("\\\n", ""), 0)
    simple = _simple_commands(root, command) if root is not None and reader.unreadable is None else None
    return CommandLine(simple, tuple(reader.found), reader.unreadable)


def _parse(command: str) -> "Node | None":
    try:
        source = command.encode("utf-8")
    except UnicodeEncodeError:
        return None  # a lone surrogate: no such line can be passed to bash
    if b"\0" in source:
        return None
    tree = _parser().parse(source)
    return None if tree.root_node.has_error else tree.root_node


# ---------------------------------------------------------------- what a pattern rule may allow


def _simple_commands(root: "Node", command: str) -> tuple[tuple[str, ...], ...] | None:
    commands: list[tuple[str, ...]] = []
    if not _statement_list(root, commands):
        return None
    source = command.encode("utf-8")
    position = 0
    for leaf in _leaves(root):
        if not _GAP.fullmatch(source, position, leaf.start_byte):
            return None  # something between two tokens that no token holds
        position = leaf.end_byte
    if not _GAP.fullmatch(source, position, len(source)):
        return None
    return tuple(commands) if commands else None


def _leaves(root: "Node") -> list["Node"]:
    leaves, stack = [], [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type in ("raw_string", "string_content"):
            leaves.append(node)
        else:
            stack.extend(reversed(node.children))
    return leaves


def _statement_list(node: "Node", commands: list[tuple[str, ...]]) -> bool:
    joins = _JOINS.get(node.type)
    if joins is None:
        return False
    for child in node.children:
        if not child.is_named:
            if child.type not in joins:
                return False  # &, |&, ;; …
        elif child.type == "command":
            words = _literal_command(child)
            if words is None:
                return False
            commands.append(words)
        elif child.type == "redirected_statement":
            body = child.child_by_field_name("body")
            if body is None or body.type != "command":
                return False
            words = _literal_command(body)
            if words is None or not all(c == body or _harmless_redirect(c) for c in child.children):
                return False
            commands.append(words)
        elif child.type in ("list", "pipeline") and node.type != "pipeline":
            if not _statement_list(child, commands):
                return False
        else:
            return False
    return True


def _literal_command(node: "Node") -> tuple[str, ...] | None:
    words: list[str] = []
    for child in node.children:
        if child.type == "file_redirect":
            if not _harmless_redirect(child):
                return None
            continue
        target = child.children[0] if child.type == "command_name" and child.child_count == 1 else child
        value = _literal(target)
        if value is None:
            return None  # an assignment, an expansion, a herestring …
        words.append(value)
    return tuple(words) if words else None


def _literal(node: "Node") -> str | None:
    """The value of a word bash leaves as written; None for anything expanded or not understood."""
    text = node.text.decode("utf-8", "surrogateescape") if node.text is not None else ""
    if node.type in ("word", "number"):
        return text if _LITERAL_WORD.fullmatch(text) else None
    if node.type == "raw_string":
        return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else None
    if node.type == "string":
        inner = []
        for child in node.children:
            if child.type == '"' and not child.is_named:
                continue
            content = child.text.decode("utf-8", "surrogateescape") if child.text is not None else ""
            if child.type != "string_content" or any(c in content for c in "$`\\"):
                return None
            inner.append(content)
        return "".join(inner)
    if node.type == "concatenation":
        parts = [_literal(child) for child in node.children]
        return None if any(part is None for part in parts) else "".join(p for p in parts if p is not None)
    return None


def _harmless_redirect(node: "Node") -> bool:
    """``>/dev/null``, ``2>>/dev/null``, ``<``/dev/null, ``2>&1``: nothing written, nothing read."""
    if node.type != "file_redirect":
        return False
    descriptor, operator, destination = None, None, []
    for child in node.children:
        if child.type == "file_descriptor":
            descriptor = child
        elif not child.is_named:
            if operator is not None:
                return False
            operator = child.type
        else:
            destination.append(child)
    if descriptor is not None and not _FD_NUMBER.fullmatch((descriptor.text or b"").decode()):
        return False  # {name}>… assigns a variable
    if operator is None or len(destination) != 1:
        return False
    target = (destination[0].text or b"").decode("utf-8", "surrogateescape")
    if destination[0].type == "word" and target == "/dev/null":
        return operator in _TO_DEV_NULL
    # >&1NAME is a file named 1NAME: the target must be the number alone
    return operator in _FD_DUPLICATION and destination[0].type == "number" and bool(_FD_NUMBER.fullmatch(target))


# ---------------------------------------------------------------- what a deny rule looks at


class _DenyReader:
    """Collects every command a line may run; ``unreadable`` says why when it cannot tell."""

    def __init__(self) -> None:
        # (words, start): the command words[start] run with words[start + 1:]. Kept as a start
        # into the shared words, so a chain of wrappers costs no copies.
        self.found: list[tuple[Words, int]] = []
        self.unreadable: str | None = None
        self.nodes_left = MAX_NODES  # also spent on each command found
        self.chars_left = 2 * MAX_COMMAND_CHARS  # every text parsed: the line, its scripts read again

    def _cannot(self, why: str) -> None:
        self.unreadable = self.unreadable or why

    def read(self, command: str, depth: int) -> "Node | None":
        """Collect the commands of ``command``; its tree, when it parses."""
        if depth > MAX_NESTING:
            self._cannot(f"nested deeper than {MAX_NESTING}")
            return None
        self.chars_left -= len(command)
        if len(command) > MAX_COMMAND_CHARS or self.chars_left < 0:
            self._cannot(f"longer than {MAX_COMMAND_CHARS // 1024} KiB, with the scripts it runs")
            return None
        root = _parse(command)
        if root is None:
            self._cannot("bash would not read it as one whole command (an open quote?)")
            return None
        stack: list[tuple[Node, int]] = [(root, depth)]
        while stack:
            node, level = stack.pop()
            self.nodes_left -= 1
            if self.nodes_left < 0:
                self._cannot(f"more than {MAX_NODES:,} parts to check")
                return None
            if level > MAX_NESTING:
                self._cannot(f"nested deeper than {MAX_NESTING}")
                return None
            if node.type == "command":
                self._runs(_loose_words(node), level)
            elif node.type in ("declaration_command", "unset_command") and node.children:
                self.found.append(((node.children[0].type, *(_loose(c) for c in node.named_children)), 0))
            elif node.type == "redirected_statement":
                self._shell_input(node, level)
            elif node.is_named and node.child_count == 0 and node.type not in _LITERAL_TEXT:
                self._unparsed_substitutions(node, level)
            nested = level + (node.type in _NESTS)
            stack.extend((child, nested) for child in node.children)
        return root

    def _runs(self, words: Words, depth: int) -> None:
        """words[0] runs, and whatever it runs in turn: a wrapper's command (any later word that is
        not an option may be it: sudo -u USER, timeout 1, nice -n 5 take values), ``find -exec``'s,
        a shell's ``-c`` script, ``eval``'s words."""
        if not words:
            return
        words = (_command_name(words[0]), *words[1:])
        self.nodes_left -= len(words)
        if self.nodes_left < 0:
            self._cannot(f"more than {MAX_NODES:,} parts to check")
            return
        wrapped_from: int | None = None  # every later word that is not an option may run
        runs_at: set[int] = set()
        for index, word in enumerate(words):
            if index > 0 and index not in runs_at and (wrapped_from is None or _is_option(word)):
                continue
            name = _command_name(word)
            self.found.append((words, index))
            self.nodes_left -= 1
            if name in WRAPPERS and wrapped_from is None:
                wrapped_from = index + 1
            elif name == "find":
                runs_at.update(i + 1 for i in range(index + 1, len(words)) if words[i] in _FIND_RUNS)
            elif name in SHELLS:
                script = _shell_script(words[index + 1:])
                if script is not _NO_SCRIPT:
                    self._script(script, depth)
            elif name == "alias":  # alias ls='rm -rf': what a later "ls" runs, once aliases expand
                for value in words[index + 1:]:
                    if value is None or "=" in value:
                        self._script(value.split("=", 1)[1] if value is not None else None, depth)
            elif name in SCRIPT_ARGUMENTS:
                tail = [w for w in words[index + 1:] if not _is_option(w)]
                if any(w is None for w in tail):
                    self._cannot(f"{name}'s words are not all literal")
                    continue
                self._script(" ".join(w for w in tail if w is not None), depth)
                for single in tail:  # trap 'rm x' EXIT, watch -n 1 'rm x': one word is the script
                    if single is not None and not _LITERAL_WORD.fullmatch(single):
                        self._script(single, depth)

    def _unparsed_substitutions(self, leaf: "Node", depth: int) -> None:
        """A substitution the grammar left inside a token's text (backticks in a heredoc's body or
        in ``${x:-…}``): bash runs it, so its commands are read too, or the line is unreadable."""
        if leaf.type == "heredoc_body" and _quoted_heredoc(leaf):
            return  # <<'EOF': the body is text
        text = (leaf.text or b"").decode("utf-8", "surrogateescape")
        if "$(" in text or "${" in text or "$[" in text:
            self._cannot("a substitution the parser did not read")
        if "`" in text:
            pieces = text.split("`")
            if len(pieces) % 2 == 0:
                self._cannot("an unclosed backtick")
            for inner in pieces[1::2]:
                self._script(inner.replace("\\`", "`"), depth)

    def _script(self, script: str | None, depth: int) -> None:
        if script is None:
            self._cannot("a shell's script is not literal")
        else:
            self.read(script, depth + 1)

    def _shell_input(self, node: "Node", depth: int) -> None:
        """``bash <<EOF … EOF`` and ``sh <<< '…'``: the shell runs its input."""
        body = node.child_by_field_name("body")
        if body is None or body.type != "command":
            return
        words = _loose_words(body)
        if not words or _command_name(words[0]) not in SHELLS:
            return
        for child in node.children:
            if child.type == "heredoc_redirect":
                for part in child.children:
                    if part.type == "heredoc_body":
                        self._script((part.text or b"").decode("utf-8", "surrogateescape"), depth)
            elif child.type == "herestring_redirect":
                self._script(_loose(child.named_children[-1]) if child.named_children else None, depth)


# Tokens whose text bash takes as it is (a comment is never run): no substitution hides in them.
_LITERAL_TEXT = frozenset({"raw_string", "ansi_c_string", "comment", "heredoc_start", "heredoc_end"})


def _quoted_heredoc(body: "Node") -> bool:
    redirect = body.parent
    starts = [c for c in redirect.children if c.type == "heredoc_start"] if redirect is not None else []
    return any(any(q in (c.text or b"") for q in (b"'", b'"', b"\\")) for c in starts)


_NESTS = frozenset({"command_substitution", "process_substitution", "subshell", "compound_statement",
                    "function_definition"})
_NO_SCRIPT = "\0no script"


def _shell_script(arguments: Words) -> str | None:
    """The script of ``bash -c SCRIPT`` (``-ec``, ``-lc`` … too); _NO_SCRIPT without -c; None if unreadable."""
    for index, word in enumerate(arguments):
        if word is None:
            return None  # an option we cannot read may be -c
        if word == "--" or not word.startswith("-"):
            return _NO_SCRIPT
        if not word.startswith("--") and "c" in word[1:]:
            rest = [w for w in arguments[index + 1:] if w != "--"]
            return rest[0] if rest else _NO_SCRIPT
    return _NO_SCRIPT


def _loose_words(node: "Node") -> Words:
    words: list[str | None] = []
    for child in node.children:
        if child.type in ("variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect"):
            continue
        target = child.children[0] if child.type == "command_name" and child.child_count == 1 else child
        words.append(_loose(target))
    return tuple(words)


def _loose(node: "Node") -> str | None:
    """A word's value as bash gives it, where it is literal: quotes and backslashes removed."""
    strict = _literal(node)
    if strict is not None:
        return strict
    text = node.text.decode("utf-8", "surrogateescape") if node.text is not None else ""
    if node.type == "word":
        if any(c in text for c in "*?[{~$`"):
            return None  # a glob, a brace, a tilde: a value only bash knows
        return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)
    if node.type == "string" and all(c.type in ('"', "string_content") for c in node.children):
        inner = text[1:-1]
        if "$" in inner or "`" in inner:
            return None
        return re.sub(r'\\([$`"\\\n])', r"\1", inner)
    if node.type == "concatenation":
        parts = [_loose(child) for child in node.children]
        return None if any(part is None for part in parts) else "".join(p for p in parts if p is not None)
    return None


def _command_name(word: str | None) -> str | None:
    """``/bin/rm`` and ``./rm`` run an ``rm``: a deny rule on rm covers them."""
    if word is None:
        return None
    return word.rsplit("/", 1)[-1] if "/" in word else word


def _is_option(word: str | None) -> bool:
    return word is not None and word.startswith("-") and word != "-"


def quote_words(words: tuple[str, ...]) -> str:
    """A simple command written back so that it reads as the same words (for the dialog's rules)."""
    return " ".join(shlex.quote(word) for word in words)


def may_name(words: Words, start: int, pattern: tuple[str, ...], *, prefix: bool) -> bool:
    """Whether a deny or ask rule's words may name the command ``words[start]`` with the words after
    it. A word that cannot be read may be anything, or several words, or none: it matches."""
    command = words[start:]
    for index, expected in enumerate(pattern):
        if index >= len(command):
            return False
        word = _command_name(command[0]) if index == 0 else command[index]
        if word is None:
            return True
        if word != (_command_name(expected) if index == 0 else expected):
            return False
    return prefix or len(command) == len(pattern) or any(word is None for word in command[len(pattern):])


# The words of a rule's pattern (``git status``, ``echo 'a b'``): plain words and quotes only, read
# without the parser (rules are read at start, where the parser is not loaded).
_PATTERN_TOKEN = re.compile(r"""[^\s;&|<>()$`\\'"]+|'[^']*'|"[^"$`\\]*"|(?P<space>[ \t]+)""")


def pattern_words(pattern: str) -> tuple[str, ...] | None:
    """The words of a rule's command pattern; None when it is not one simple command of plain words."""
    words: list[str] = []
    current: list[str] | None = None
    position = 0
    text = pattern.strip()
    while position < len(text):
        token = _PATTERN_TOKEN.match(text, position)
        if token is None:
            return None
        position = token.end()
        if token.group("space"):
            if current is not None:
                words.append("".join(current))
            current = None
            continue
        piece = token.group()
        if current is None and piece.startswith("#"):
            return None  # a comment, in bash
        current = current if current is not None else []
        current.append(piece[1:-1] if piece[0] in "'\"" else piece)
    if current is not None:
        words.append("".join(current))
    return tuple(words) if words else None
