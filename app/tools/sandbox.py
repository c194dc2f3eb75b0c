"""The sandbox around run_bash's commands: bubblewrap (``bwrap``) when it works here.

Inside it the whole file system is read-only except the workspace and a private ``/tmp``
(a tmpfs of the command's own, ``TMPDIR`` points at it); tidegauge's data and config
directories, the user's key stores and the session's agent sockets are covered (an empty
tmpfs over a folder, ``/dev/null`` over a file); the network is a namespace of its own with
nothing in it unless ``sandbox_network`` is on; and the command is in a PID namespace of its
own whose first process dies with tidegauge (``--die-with-parent``), which takes every
process in the namespace with it, whatever they did to their environment or session.

``--new-session`` puts the command in a session of its own (so it cannot push keys into a
terminal with TIOCSTI); stdin is /dev/null and nothing in a command has job control to lose.
The tool still ends the whole run by signalling the outer ``bwrap``: its death takes the
namespace down.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


from app.kernel.events import SandboxState
from app.kernel.secret_stores import HOME_SECRET_STORES

SandboxMode = Literal["auto", "on", "off"]

INSTALL_HINT = "apt-get install bubblewrap"
# Seconds the start-up check may take: bwrap either starts `true` at once or fails at once.
_PROBE_TIMEOUT_S = 10.0

# The namespaces and mounts every sandboxed command gets (and the start-up check uses).
# (A mount point bwrap would have to make in the read-only root fails the command: /var/tmp is
# covered only where it exists.)
_BASE_ARGS = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
              *(("--tmpfs", "/var/tmp") if os.path.isdir("/var/tmp") else ()),
              "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session")


@functools.cache
def _bwrap_path() -> str:
    return shutil.which("bwrap") or "bwrap"


_checked: list[str | None] = []  # the check's answer, once made
_checking = threading.Lock()


def start_check() -> None:
    """Check bwrap on a thread of its own: start-up goes on meanwhile, and whoever needs the answer
    first (the session's header, the first command) waits for it only if it is not in yet."""
    threading.Thread(target=bwrap_problem, name="bwrap-check", daemon=True).start()


def bwrap_problem() -> str | None:
    """None when bwrap can start a command in the sandbox's namespaces here, else why not.

    Made once per process: being on PATH is not enough (user namespaces may be off, a
    container may forbid mounts).
    """
    with _checking:
        if not _checked:
            _checked.append(_check_bwrap())
        return _checked[0]


def _check_bwrap() -> str | None:
    path = _bwrap_path()
    if os.sep not in path:
        return "bwrap (bubblewrap) is not installed"
    try:
        done = subprocess.run([path, *_BASE_ARGS, "--unshare-net", "--", "true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=_PROBE_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not be started ({exc})"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = said[-1][:200] if said else f"exit code {done.returncode}"
        return f"bwrap cannot make its namespaces here ({detail}): are user namespaces disabled?"
    return None


def _existing(paths: tuple[str, ...]) -> list[tuple[Path, bool]]:
    """Each path that exists, resolved (a link to a key store hides the store), and whether it
    is a folder."""
    found: dict[Path, bool] = {}
    for path in paths:
        if not os.path.lexists(path):  # most stores are absent: one lstat each, at every command
            continue
        real = os.path.realpath(path)
        try:
            is_dir = stat.S_ISDIR(os.stat(real).st_mode)
        except OSError:
            continue  # a dangling link: nothing to hide
        if real != "/":
            found.setdefault(Path(real), is_dir)
    return list(found.items())


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class SandboxPolicy:
    """How this session's commands run; ``private`` are tidegauge's own folders (data, config)."""

    mode: SandboxMode = "off"
    network: bool = False
    private: tuple[Path, ...] = ()
    home: Path | None = None
    # The session's agent sockets (ssh-agent, gpg-agent, the keyring) live here.
    runtime_dir: Path | None = None
    extra_hidden: tuple[Path, ...] = field(default=())

    @property
    def state(self) -> SandboxState:
        if self.mode == "off":
            return "off"
        return "bwrap" if bwrap_problem() is None else "unavailable"

    @property
    def active(self) -> bool:
        return self.state == "bwrap"

    def refusal(self) -> str | None:
        """Why no command may run at all: the user asked for the sandbox ("on") and it cannot run."""
        if self.mode != "on" or (problem := bwrap_problem()) is None:
            return None
        return (f"run_bash is refused: sandbox = \"on\" but {problem}. Install it ({INSTALL_HINT}) or enable "
                "user namespaces, or set sandbox = \"auto\" or \"off\" to run commands without it.")

    def start_warning(self) -> str | None:
        """The one line said at start when commands will run unsandboxed although the sandbox was
        asked for ("auto"), or will not run at all ("on")."""
        if self.mode == "off" or (problem := bwrap_problem()) is None:
            return None
        if self.mode == "on":
            return (f"commands will not run: sandbox = \"on\" but {problem}; install it ({INSTALL_HINT}) "
                    "or enable user namespaces")
        return (f"commands are not sandboxed: {problem}; install it ({INSTALL_HINT}) or enable user "
                "namespaces, or set sandbox = \"off\" to silence this")

    @functools.cached_property
    def hidden_paths(self) -> tuple[str, ...]:
        """What to cover, whether it exists or not (checked at each command: a store made later)."""
        paths = [str(path) for path in (*self.private, *self.extra_hidden)]
        if self.home is not None:
            paths += [os.path.join(self.home, store) for store in HOME_SECRET_STORES]
        if self.runtime_dir is not None:
            paths.append(str(self.runtime_dir))
        return tuple(paths)

    def wrap(self, argv: list[str], workspace: Path) -> list[str]:
        """``argv`` as bwrap runs it in the sandbox, with ``workspace`` writable."""
        args = [_bwrap_path(), *_BASE_ARGS]
        if not self.network:
            args.append("--unshare-net")
        hidden = _existing(self.hidden_paths)
        work = workspace.resolve()

        def cover(paths: list[tuple[Path, bool]]) -> None:
            for path, is_dir in paths:
                args.extend(("--tmpfs", str(path)) if is_dir else ("--ro-bind", "/dev/null", str(path)))

        # Covered first, then the workspace bound over them (a workspace inside a covered folder
        # stays usable), then what lies inside the workspace covered again.
        cover([(path, is_dir) for path, is_dir in hidden if not _inside(path, Path("/tmp"))])
        args.extend(("--bind", str(work), str(work)))
        cover([(path, is_dir) for path, is_dir in hidden if _inside(path, work) and path != work])
        args.extend(("--chdir", str(work), "--"))
        return args + argv


def policy_for(mode: SandboxMode, network: bool, private: tuple[Path, ...]) -> SandboxPolicy:
    """The policy for this user: their home's key stores and agent sockets hidden, with ``private``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    sockets = tuple(Path(os.environ[name]) for name in ("SSH_AUTH_SOCK",) if os.environ.get(name))
    return SandboxPolicy(mode=mode, network=network, private=private, home=Path.home(),
                         runtime_dir=Path(runtime) if runtime else None, extra_hidden=sockets)
