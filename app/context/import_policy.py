"""Which files memory imports and rule files may read, and the bounded read.

Kept apart from ``memory.py`` because both the memory loader and ``rules.py`` apply it,
and the memory loader also loads the rules: one module each way, no cycle.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal

from app.kernel.secret_stores import HOME_SECRET_STORES


def find_repo_root(cwd: Path) -> Path | None:
    """The nearest ancestor (or ``cwd`` itself) holding ``.git`` (a dir or a worktree file)."""
    for d in (cwd, *cwd.parents):
        if (d / ".git").exists():
            return d
    return None


# ---- where imports may come from ----

# Bytes read from one memory file, import or rule file, and from all of them together: a 3 GB
# import (or /dev/zero behind a symlink) must not be read whole before the first frame.
MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 1024 * 1024

# Under the user's home: stores of keys and tokens. Never imported, approved or not.
_HOME_SECRET_STORES = HOME_SECRET_STORES
# File names that hold secrets wherever they are (a repository's .env as much as the home's):
# dotenv and direnv files, login and registry tokens, cloud credentials, SSH keys, Terraform
# variables and state. The README lists them (Security).
_SECRET_NAMES = frozenset({
    ".env", ".envrc", ".netrc", "_netrc", ".git-credentials", ".pgpass", "credentials", "credentials.json",
    ".npmrc", ".pypirc", ".yarnrc.yml", ".dockercfg", ".vault-token", ".s3cfg", ".boto", ".my.cnf",
    ".htpasswd", "terraform.tfvars",
    "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk",
})
# Folder and file together: a config.json is harmless, Docker's is not.
_SECRET_PAIRS = frozenset({(".docker", "config.json"), (".aws", "config"), (".kube", "config"),
                           ("gh", "hosts.yml")})
_SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".tfvars", ".tfstate",
                    ".tfstate.backup", ".kdbx")
_ENV_EXAMPLES = (".example", ".sample", ".template", ".dist")
_PRIVATE_KEY_MARK = b"PRIVATE KEY-----"

ImportAction = Literal["ask", "refused", "declined", "cut"]


@dataclass(frozen=True)
class ImportNotice:
    """Something the user must hear about an import or a rule file: it needs their approval
    (``ask``), it is never read (``refused``), they said no earlier (``declined``), or only
    its head was read (``cut``)."""

    action: ImportAction
    path: Path  # resolved: what would be read
    importer: Path  # the file naming it (for a rule file: its rules directory)
    reason: str


@dataclass
class _Bounded:
    data: bytes | None  # None: refused (``refusal`` says why)
    size: int = 0
    refusal: str = ""


def read_bounded(path: Path, cap: int) -> _Bounded:
    """At most ``cap`` bytes of a regular file. A FIFO, a device or a socket is refused
    without blocking: opened non-blocking, checked with fstat before any read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        return _Bounded(None, refusal=f"unreadable ({err.strerror or err})")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _Bounded(None, refusal="not a regular file (a FIFO, device or socket is never read)")
        chunks: list[bytes] = []
        left = max(0, min(cap, info.st_size if info.st_size else cap))
        while left > 0:
            chunk = os.read(fd, min(left, 64 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return _Bounded(b"".join(chunks), size=info.st_size)
    except OSError as err:
        return _Bounded(None, refusal=f"unreadable ({err.strerror or err})")
    finally:
        os.close(fd)


def _is_within(path: Path, folder: Path | None) -> bool:
    if folder is None:
        return False
    return path == folder or folder in path.parents


def _human_bytes(size: int) -> str:
    for unit, step in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= step:
            return f"{size / step:.1f} {unit}"
    return f"{size} bytes"


@dataclass
class ImportPolicy:
    """Which files memory imports and rule files may read, and what was held back.

    Inside the repository (or the workspace when it is not in one): read. The user's own
    memory and rule files (in tidegauge's config dir) may import from the user's home too.
    Anywhere else only with the user's approval (``allowed``: memory_allowed_imports and
    the approvals remembered for this project). Secret stores, tidegauge's config and data
    files and private keys: never. Paths are resolved first, so a symlink in the repository
    pointing outside counts as outside.
    """

    workspace_root: Path
    user_config_dir: Path | None = None
    home: Path | None = None
    data_dir: Path | None = None
    allowed: frozenset[Path] = frozenset()
    declined: frozenset[Path] = frozenset()
    max_file_bytes: int = MAX_FILE_BYTES
    bytes_left: int = MAX_TOTAL_BYTES
    notices: list[ImportNotice] = field(default_factory=list)

    @classmethod
    def for_workspace(cls, cwd: Path, user_config_dir: Path | None, *, data_dir: Path | None = None,
                      allowed: Iterable[Path] = (), declined: Iterable[Path] = ()) -> ImportPolicy:
        cwd = cwd.resolve()
        try:
            home: Path | None = Path.home().resolve()
        except (RuntimeError, KeyError):
            home = None
        return cls(workspace_root=find_repo_root(cwd) or cwd,
                   user_config_dir=real_path(user_config_dir) if user_config_dir is not None else None,
                   home=home, data_dir=real_path(data_dir) if data_dir is not None else None,
                   allowed=frozenset(real_path(p) for p in allowed),
                   declined=frozenset(real_path(p) for p in declined))

    def _note(self, notice: ImportNotice) -> None:
        if all((n.action, n.path) != (notice.action, notice.path) for n in self.notices):
            self.notices.append(notice)

    def _own_workspace(self, path: Path) -> bool:
        """A workspace tidegauge made inside its data directory (the demo's scratch project):
        its own files are the project's, not tidegauge's; the session files beside it are not."""
        return (self.data_dir is not None and _is_within(self.workspace_root, self.data_dir)
                and self.workspace_root != self.data_dir and _is_within(path, self.workspace_root))

    def secret_reason(self, path: Path) -> str | None:
        """Why ``path`` (resolved) is never imported, or None."""
        name = path.name
        if self.data_dir is not None and _is_within(path, self.data_dir) and not self._own_workspace(path):
            return "it is in tidegauge's data directory (sessions, approvals)"
        if self.user_config_dir is not None and _is_within(path, self.user_config_dir) \
                and path.suffix.lower() != ".md":
            return "it is tidegauge's configuration (it holds API keys)"
        if self.home is not None:
            for store in _HOME_SECRET_STORES:
                if _is_within(path, self.home / store):
                    return f"~/{store} is a store of keys or tokens"
        if ".git" in path.parts[:-1]:
            return "it is inside a .git folder (its config holds remote URLs, tokens among them)"
        if name in _SECRET_NAMES or (path.parent.name, name) in _SECRET_PAIRS:
            return f"a file named {name} holds secrets"
        if (name.startswith((".env.", "secrets.")) or name.endswith(".env")) and not name.endswith(_ENV_EXAMPLES):
            return f"a file named {name} holds secrets"
        if name.endswith(_SECRET_SUFFIXES):
            return f"a {path.suffix} file holds keys or secrets"
        return None

    def placement(self, path: Path, *, user_level: bool) -> Literal["inside", "allowed", "declined", "outside"]:
        if _is_within(path, self.workspace_root):
            return "inside"
        if self.approved(path):  # a folder allows what is in it
            return "allowed"
        if self.user_config_dir is not None and _is_within(path, self.user_config_dir):
            return "inside"
        if user_level and self.home is not None and _is_within(path, self.home):
            return "inside"
        return "declined" if path in self.declined else "outside"

    def admit(self, path: Path, importer: Path, *, user_level: bool) -> bool:
        """May ``path`` (resolved) be read for ``importer``? When not, the reason is noted."""
        reason = self.secret_reason(path)
        if reason is not None:
            self._note(ImportNotice("refused", path, importer, f"{reason}; never imported, approved or not"))
            return False
        place = self.placement(path, user_level=user_level)
        if place == "declined":
            self._note(ImportNotice("declined", path, importer, "you declined it for this project"))
            return False
        if place == "outside":
            self._note(ImportNotice("ask", path, importer,
                                    f"outside the repository {self.workspace_root}"))
            return False
        return True

    def approved(self, path: Path) -> bool:
        """Approved by the user (memory_allowed_imports or an answer for this project)."""
        return any(_is_within(path, allowed) for allowed in self.allowed)

    def read(self, path: Path, importer: Path, *, scan: bool = False) -> str | None:
        """The text of an admitted file, at most the byte caps of it (a notice when cut), or
        None for a file that is refused (not regular, a private key) or not text. With
        ``scan`` (an import or a rule file), a text holding something shaped like a credential
        is held back until the user approves that file."""
        cap = min(self.max_file_bytes, max(self.bytes_left, 0))
        if cap <= 0:
            self._note(ImportNotice("cut", path, importer,
                                    f"not read: the {_human_bytes(MAX_TOTAL_BYTES)} total for memory files is used up"))
            return None
        got = read_bounded(path, cap)
        if got.data is None:
            self._note(ImportNotice("refused", path, importer, got.refusal))
            return None
        self.bytes_left -= len(got.data)
        if _PRIVATE_KEY_MARK in got.data:
            self._note(ImportNotice("refused", path, importer,
                                    "it holds a private key; never imported, approved or not"))
            return None
        if b"\0" in got.data[:8192]:
            return None  # binary: not a rules file
        text = got.data.decode("utf-8", errors="replace")
        if scan and not self.approved(path):
            from app.context.credential_scan import credential_kind  # ~0.25 s: only when an import is read

            kind = credential_kind(text)
            if kind is not None:
                if path in self.declined:
                    self._note(ImportNotice("declined", path, importer, "you declined it for this project"))
                else:
                    self._note(ImportNotice("ask", path, importer,
                                            f"holding what looks like a credential ({kind})"))
                return None
        if got.size > len(got.data):
            self._note(ImportNotice("cut", path, importer,
                                    f"{_human_bytes(got.size)}, only the first {_human_bytes(len(got.data))} read"))
            text += (f"\n[... cut: {path} is {_human_bytes(got.size)}; only the first "
                     f"{_human_bytes(len(got.data))} were read ...]")
        return text

    def user_level(self, path: Path) -> bool:
        """A file of the user's own (in tidegauge's config dir), not of the repository."""
        return self.user_config_dir is not None and _is_within(real_path(path), self.user_config_dir)


def real_path(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))
