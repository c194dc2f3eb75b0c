"""Secret redaction: registered keys and provider env keys never come out."""

from __future__ import annotations

import os
from typing import Any

import pytest

from app.kernel import redact as redact_mod
from app.kernel.redact import REDACTED, clear_secrets, holds_secret, redact, redact_obj, register_secret

KEY_VARS = ("OPENAI_API_KEY", "DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch):
    for name in KEY_VARS:
        monkeypatch.delenv(name, raising=False)
    clear_secrets()
    yield
    clear_secrets()


def test_registered_secret_is_replaced_everywhere() -> None:
    register_secret("sk-live-abcdef123456")
    text = "key sk-live-abcdef123456 and again:sk-live-abcdef123456!"
    assert redact(text) == f"key {REDACTED} and again:{REDACTED}!"


def test_short_values_are_not_secrets() -> None:
    assert register_secret("abc1234") is False  # 7 characters
    assert redact("abc1234 stays") == "abc1234 stays"


def test_nothing_registered_returns_the_same_object() -> None:
    text = "nothing secret here " * 100
    assert redact(text) is text
    data = {"a": [text]}
    assert redact_obj(data) is data


def test_provider_env_keys_are_picked_up_even_when_set_late(monkeypatch: pytest.MonkeyPatch) -> None:
    assert redact("sk-ant-late-key-000111") == "sk-ant-late-key-000111"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-late-key-000111")
    assert redact("auth: sk-ant-late-key-000111") == f"auth: {REDACTED}"


def test_a_key_changed_in_the_environment_or_a_replaced_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key variables are looked for in os.environ's own table before they are read: a key set
    again to another value is seen, and so is one in an environment that is not os.environ."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-first-key-000111")
    assert redact("sk-first-key-000111") == REDACTED
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-second-key-000222")
    assert redact("sk-second-key-000222") == REDACTED
    monkeypatch.setattr(os, "environ", {"DEEPSEEK_API_KEY": "sk-plain-dict-key-333"})
    assert redact("sk-plain-dict-key-333 and sk-first-key-000111") == f"{REDACTED} and {REDACTED}"


def test_regex_characters_in_a_secret_are_literal() -> None:
    register_secret("a.b*c+d?e(f)")
    assert redact("a.b*c+d?e(f)") == REDACTED
    assert redact("aXbbbcdde(f)") == "aXbbbcdde(f)"


def test_longer_secret_containing_a_shorter_one_is_removed_whole() -> None:
    register_secret("secret-part-0001")
    register_secret("prefix-secret-part-0001-suffix")
    assert redact("x prefix-secret-part-0001-suffix y") == f"x {REDACTED} y"


def test_redact_obj_walks_nested_data_and_keeps_other_values() -> None:
    register_secret("tok-9876543210")
    data: dict[str, Any] = {
        "headers": {"authorization": "Bearer tok-9876543210"},
        "list": ["tok-9876543210", 3, None, True, ("tok-9876543210",)],
        "tok-9876543210": 1.5,
    }
    assert redact_obj(data) == {
        "headers": {"authorization": f"Bearer {REDACTED}"},
        "list": [REDACTED, 3, None, True, (REDACTED,)],
        REDACTED: 1.5,
    }
    # the input is not modified
    assert data["headers"]["authorization"] == "Bearer tok-9876543210"


def test_registering_twice_changes_nothing() -> None:
    assert register_secret("dup-secret-0001") is True
    assert register_secret("dup-secret-0001") is False
    assert redact_mod.secret_count() == 1


def test_secrets_registered_together_are_compiled_once_at_their_next_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """A login or a refresh registers two tokens: the pattern (every secret's encoded forms, compiled
    in milliseconds, more the more secrets there are) is compiled once, when it is next used, and
    both are redacted there."""
    clear_secrets()
    compiled: list[int] = []
    rebuild = redact_mod._rebuild

    def counted() -> None:
        compiled.append(1)
        rebuild()

    monkeypatch.setattr(redact_mod, "_rebuild", counted)
    access, refresh = "access-token-" + "a1" * 12, "refresh-token-" + "b2" * 12

    assert register_secret(access) and register_secret(refresh)
    assert redact(f"bearer {access}, refresh {refresh}") == "bearer [REDACTED], refresh [REDACTED]"
    assert holds_secret(refresh) and len(compiled) == 1
    clear_secrets()


READERS = {
    "redact": lambda text: redact(text) != text,
    "redact_obj": lambda text: redact_obj({"k": [text]}) != {"k": [text]},
    "holds_secret": holds_secret,
    # a cut four characters into the copy (after "header ") moves back to where the copy begins
    "safe_cut": lambda text: redact_mod.safe_cut(text, len("header ") + 4) == len("header "),
}


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_every_reader_sees_a_secret_registered_just_before_it_on_any_thread(reader: Any) -> None:
    """The pattern is compiled at its next use, not at registration: a reader that matched with the
    pattern it last saw would let a token registered since (a refresh, on the session's thread)
    through to a log or a request. Each reader sees each new secret at once, its encoded forms too."""
    import base64
    import threading

    clear_secrets()
    try:
        for n in range(3):
            token = f"tok{n}-" + "c3" * 12
            if n == 1:  # registered on another thread, as a login or refresh does
                worker = threading.Thread(target=register_secret, args=(token,))
                worker.start()
                worker.join()
            else:
                assert register_secret(token)
            assert reader(f"header {token} trailer"), token
            assert reader("header " + base64.b64encode(token.encode()).decode() + " trailer"), token
    finally:
        clear_secrets()
