"""Session folders: layout, ids, finding the latest one of a directory, opening by id."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from app.kernel.messages import Message
from app.session.store import Session, SessionError, SessionNotFound, SessionStore, new_session_id, restore


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "data")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


def test_create_lays_out_the_folder(store: SessionStore, project: Path) -> None:
    session = store.create(project, "anthropic", "claude-sonnet-4-5")
    assert session.dir == store.data_dir / "sessions" / session.id
    assert session.tool_results_dir.is_dir()
    assert session.transcript_path == session.dir / "transcript.jsonl"
    meta = json.loads((session.dir / "meta.json").read_text())
    assert meta["id"] == session.id
    assert meta["cwd"] == str(project.resolve())
    assert meta["provider"] == "anthropic" and meta["model"] == "claude-sonnet-4-5"
    assert isinstance(meta["created"], float)
    assert session.meta["provider"] == session.meta.provider == "anthropic"
    # the user's conversation is readable by the user only
    assert stat.S_IMODE(session.dir.stat().st_mode) == 0o700


def _typed_in(session: Session) -> Session:
    """A prompt in the session: --continue passes over sessions in which nothing was typed."""
    with session.writer() as writer:
        writer.append_message(Message.user("a prompt"))
    return session


def test_cwd_is_resolved_through_symlinks(store: SessionStore, project: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-project"
    link.symlink_to(project)
    session = _typed_in(store.create(link, "demo", None))
    assert session.cwd == project.resolve()
    assert store.latest_for(project).id == session.id
    assert store.latest_for(link).id == session.id


def test_ids_sort_by_time_and_look_like_the_example() -> None:
    earlier, later = new_session_id(1_700_000_000.0), new_session_id(1_700_000_061.0)
    assert earlier < later
    assert earlier.startswith("20231114-221320-") and len(earlier) == len("20261129-211944-3fa2")


def test_latest_for_picks_the_newest_session_of_that_directory(store: SessionStore, project: Path,
                                                                tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    first = _typed_in(store.create(project, "demo", None))
    second = _typed_in(store.create(project, "demo", None))
    elsewhere = _typed_in(store.create(other, "demo", None))
    later = second.meta.created + 60  # the same second: activity must not reorder them
    os.utime(first.transcript_path, (later - 1, later - 1))
    os.utime(second.transcript_path, (later, later))

    assert store.latest_for(project).id == second.id
    assert store.latest_for(other).id == elsewhere.id
    assert [s.id for s in store.list_for(project)] == [second.id, first.id]


def test_latest_for_follows_activity_not_only_creation(store: SessionStore, project: Path) -> None:
    """A session resumed and worked in is the one --continue should pick next time."""
    first = store.create(project, "demo", None)
    second = store.create(project, "demo", None)
    with first.writer() as writer:
        writer.append_message(Message.user("resumed and used again"))
    later = second.meta.created + 60
    os.utime(first.transcript_path, (later, later))
    assert store.latest_for(project).id == first.id


def test_latest_for_an_unknown_directory_is_none(store: SessionStore, project: Path) -> None:
    assert store.latest_for(project) is None  # no sessions dir at all
    store.create(project / "..", "demo", None)
    assert store.latest_for(project) is None


def test_open_by_id_and_by_unique_prefix(store: SessionStore, project: Path) -> None:
    session = store.create(project, "openai", "gpt-4o")
    assert store.open(session.id).dir == session.dir
    assert store.open(session.id[:-2]).id == session.id


def test_open_missing_session_says_where_it_looked(store: SessionStore) -> None:
    with pytest.raises(SessionNotFound) as info:
        store.open("20200101-000000-beef")
    assert str(info.value) == f"no session '20200101-000000-beef' in {store.data_dir / 'sessions'}"


@pytest.mark.parametrize("bad_id", ["", "../data", "/etc", ".", "..", "a/b"])
def test_open_rejects_ids_that_are_not_ids(store: SessionStore, project: Path, bad_id: str) -> None:
    store.create(project, "demo", None)
    with pytest.raises(SessionNotFound):
        store.open(bad_id)


def test_damaged_meta_is_skipped_in_listings_and_reported_on_open(store: SessionStore,
                                                                  project: Path) -> None:
    good = store.create(project, "demo", None)
    bad = store.create(project, "demo", None)
    (bad.dir / "meta.json").write_text("{ not json")
    assert [s.id for s in store.list_for(project)] == [good.id]
    with pytest.raises(SessionError) as info:
        store.open(bad.id)
    assert bad.id in str(info.value) and "meta.json" in str(info.value)


def test_a_session_resumes_through_its_transcript(store: SessionStore, project: Path) -> None:
    session = store.create(project, "demo", None)
    with session.writer() as writer:
        writer.append_message(Message.user("remember the number 7"))
        writer.append_message(Message.assistant_text("noted"))
        writer.end_turn()
    reopened = store.latest_for(project)
    state = restore(reopened)  # type: ignore[arg-type]
    assert [m.text for m in state.history] == ["remember the number 7", "noted"]
    assert state.turns == 1
