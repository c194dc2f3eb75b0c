"""Files only their owner may read: saved tool outputs hold whatever a command printed.

Below app.tools and app.context (both save outputs), so neither imports the other for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO


def open_private(target: Path) -> IO[bytes]:
    """``target`` opened for writing, readable by its owner only (0600, whatever the umask).

    Tool outputs can hold anything the commands printed; other users on the
    machine must not read them. The folder is made 0700 when we create it. A
    symlink planted at ``target`` is not followed (OSError instead).
    """
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")
