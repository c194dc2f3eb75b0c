"""A held secret is redacted in the forms a tool or a model turns it into: base64 and
base64url at any of the three byte offsets (padded or not), hex, percent-encoding, and any
of them folded over lines. Unit checks on ``redact``, and the attacker's case through the
real binary: a tool output holding encoded copies of the API key reaches neither the
provider, nor the transcript, nor stdout."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fake_llm_server import openai_text, openai_tool_calls

from app.kernel.redact import REDACTED, clear_secrets, holds_secret, redact, register_secret

KEY = "sk-test-encoded-key+/0123456789abcdef"  # '+' and '/': its URL-encoded form differs


@pytest.fixture
def held() -> Iterator[str]:
    clear_secrets()
    register_secret(KEY)
    yield KEY
    clear_secrets()


def encoded_copies(secret: str) -> dict[str, str]:
    data = secret.encode()
    copies: dict[str, str] = {"hex": data.hex(), "HEX": data.hex().upper(), "url": quote(secret, safe=""),
                              "percent": "".join(f"%{b:02x}" for b in data)}
    for offset in range(3):  # the secret at each byte alignment inside a longer stream
        wrapped = b"x" * offset + data + b"\n"
        copies[f"b64@{offset}"] = base64.b64encode(wrapped).decode()
        copies[f"b64url-nopad@{offset}"] = base64.urlsafe_b64encode(wrapped).decode().rstrip("=")
    long = base64.b64encode(b"export OPENAI_API_KEY=" + data + b"\n").decode()
    copies["b64 folded at 76"] = "\n".join(textwrap.wrap(long, 76))
    copies["b64 folded at 64"] = "\n".join(textwrap.wrap(long, 64))
    copies["key folded at 16"] = "\n".join(textwrap.wrap(secret, 16))
    copies["hex split by spaces"] = " ".join(textwrap.wrap(data.hex(), 8))
    return copies


@pytest.mark.parametrize("form", list(encoded_copies(KEY)))
def test_every_encoded_or_folded_copy_is_redacted(held: str, form: str) -> None:
    copy = encoded_copies(held)[form]
    text = f"before {copy} after"

    out = redact(text)

    assert REDACTED in out and out.startswith("before ") and out.endswith(" after")
    assert holds_secret(text)
    # What is left of the copy cannot be decoded back to the key, nor to a long part of it.
    left = out.replace(REDACTED, "\0")
    assert all(len(piece.strip()) <= 8 for piece in left.split("\0")[1:-1])


def test_text_that_is_not_a_copy_is_left_alone(held: str) -> None:
    text = "ordinary base64 " + base64.b64encode(b"nothing to see here, really").decode() + " and hex 00ff"
    assert redact(text) == text and not holds_secret(text)


# ---- through the real binary ----

def test_a_tool_output_with_encoded_copies_of_the_key_reaches_no_request_transcript_or_stdout(fake_llm, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    copies = encoded_copies(KEY)
    (work / "leak.txt").write_text("\n\n".join(copies.values()) + "\n")
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "cat leak.txt"})]))
    fake_llm.enqueue(openai_text("done"))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               OPENAI_API_KEY=KEY, TIDEGAUGE_MEMORY_UPDATE_TOKENS="0")

    proc = subprocess.run([sys.executable, "-m", "app", "-p", "show me leak.txt", "--yes", "--provider", "openai",
                           "--model", "m", "--base-url", fake_llm.base_url("openai"), "--output-format",
                           "stream-json"], cwd=work, env=env, capture_output=True, text=True, timeout=180)

    assert proc.returncode == 0, proc.stderr
    assert len(fake_llm.requests) == 2
    tool_result = json.dumps(fake_llm.requests[1].json)
    assert tool_result.count(REDACTED) >= len(copies)  # the tool ran and its output was sent, redacted
    saved = "\n".join(path.read_text(errors="replace") for path in (tmp_path / "data").rglob("*") if path.is_file())
    assert REDACTED in saved  # the transcript holds the tool output, redacted
    for where, text in (("the request", tool_result), ("a file under the data directory", saved),
                        ("stdout", proc.stdout), ("stderr", proc.stderr)):
        unfolded = "".join(text.replace("\\n", "").split())  # JSON's escaped and real line ends both
        for form, copy in copies.items():
            assert "".join(copy.split()) not in unfolded, f"the {form} copy reached {where}"
