"""The markers tools write into their results, and the one way to read them back.

run_bash ends its result with ``[exit code: N]`` (or ``[timed out after N s…``), and
the registry's cut leaves ``[output truncated: N characters in total, M left out…``.
The summarizer, the summary audit and the demo read them; the patterns live here so a
change of wording is one change.
"""

from __future__ import annotations

import re

EXIT_CODE = re.compile(r"\[exit code: (-?\d+|unknown)([^\]]*)\]")
TRUNCATED = re.compile(r"\[output truncated: ([\d,]+) characters in total, ([\d,]+) left out")
TIMED_OUT = re.compile(r"\[timed out after (\d+) s")

# The result a call gets when it never finished: interrupted by the user, or the
# session ended (killed) before it did. One text, whoever repairs the history.
INTERRUPTED_RESULT = ("Interrupted before this tool finished (by the user, or the session ended). "
                      "Ask the user before running it again.")
# The result of a call the turn was interrupted before it started (waiting for its approval, or
# queued behind the call that was running): it did nothing, and the model is told so.
NOT_RUN_RESULT = ("Not run: the user interrupted the turn before this tool started. "
                  "Ask the user before running it.")

# The input of a call whose arguments were refused for their size or depth before they were
# parsed: the provider writes the problem under this key, and the registry answers the model with it.
BAD_ARGUMENTS_KEY = "_bad_arguments"
