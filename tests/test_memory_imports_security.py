"""Issue 24: memory imports and rule files cannot carry files from outside the repository,
secret stores or tidegauge's own keys to the provider; reads are bounded; the keys tidegauge
holds never leave in a request body, whatever brought them in.

Through the CLI (``tidegauge -p``) against the loopback fake server, which records every request
body: the real process (``python -m app``) where what the process prints must hold no key, the
same CLI in-process where what is checked is what was sent; the dashboard's question through
Pilot on a real session.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from cli_in_process import run_cli
from fake_llm_server import openai_text

from app.context.memory import APPROVALS_FILE, ImportApprovals, ImportPolicy, load_memory

OPENAI_KEY = "sk-test-openai-key-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-ANTHROPICSECRET0123456789abcdef"
SSH_MARKER = "SSH-PRIVATE-KEY-MATERIAL-41f7"
OUTSIDE_MARKER = "OUTSIDE-SECRET-TEXT-9c2e"
RULE_MARKER = "PROJECT-RULE-be-kind-77ad"


class Layout:
    """A home with a key and tidegauge's config, a repository beside a folder outside it."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.config_dir = self.home / ".config" / "tidegauge"
        self.data_dir = tmp_path / "data"
        self.repo = tmp_path / "work" / "repo"
        self.outside = tmp_path / "work" / "outside"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_ed25519").write_text(f"{SSH_MARKER}\n")
        self.config_dir.mkdir(parents=True)
        self.write_config("")
        (self.repo / ".git").mkdir(parents=True)
        self.outside.mkdir(parents=True)
        (self.outside / "secret.txt").write_text(f"{OUTSIDE_MARKER}\n")

    def write_config(self, extra: str) -> None:
        config = self.config_dir / "config.toml"
        config.write_text(f'{extra}\n[api_keys]\nanthropic = "{ANTHROPIC_KEY}"\n')
        config.chmod(0o600)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
        env.update({"HOME": str(self.home), "TIDEGAUGE_CONFIG_DIR": str(self.config_dir),
                    "TIDEGAUGE_DATA_DIR": str(self.data_dir), "OPENAI_API_KEY": OPENAI_KEY,
                    "PYTHONUNBUFFERED": "1"})
        return env

    def command(self, fake_llm, prompt: str = "hello") -> list[str]:
        return [sys.executable, "-m", "app", "-p", prompt, "--provider", "openai", "--model", "m",
                "--base-url", fake_llm.base_url("openai")]

    def run(self, fake_llm, prompt: str = "hello", real_process: bool = False) -> subprocess.CompletedProcess[str]:
        """The same CLI in this process with exactly this environment (tests/cli_in_process.py;
        a ``python -m app`` start is ~0.5 CPU-s), or ``real_process``: where a key must show
        nowhere in what the process itself prints, and for the real binary's wiring."""
        if not real_process:
            return run_cli(self.command(fake_llm, prompt)[3:], cwd=self.repo, env=self.env())
        return subprocess.run(self.command(fake_llm, prompt), cwd=self.repo, env=self.env(), capture_output=True,
                              text=True, timeout=120)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def sent(fake_llm) -> str:
    """Every request body the server received, as one text."""
    return "\n".join(json.dumps(request.json, ensure_ascii=False) for request in fake_llm.requests)


def system_prompt(fake_llm) -> str:
    return fake_llm.requests[-1].json["messages"][0]["content"]


def test_a_hostile_agents_md_sends_no_key_no_outside_file_and_says_how_to_allow(fake_llm, layout):
    (layout.repo / "AGENTS.md").write_text(
        f"{RULE_MARKER}\n@~/.ssh/id_ed25519\n@../outside/secret.txt\n@~/.config/tidegauge/config.toml\n"
        "@notes.md\n")
    os.symlink(layout.outside / "secret.txt", layout.repo / "notes.md")  # inside by name, outside in fact
    (layout.repo / ".agents" / "rules").mkdir(parents=True)
    os.symlink(layout.outside / "secret.txt", layout.repo / ".agents" / "rules" / "leak.md")
    fake_llm.enqueue(openai_text("ok"))

    proc = layout.run(fake_llm, real_process=True)

    assert proc.returncode == 0, proc.stderr
    body = sent(fake_llm)
    assert RULE_MARKER in system_prompt(fake_llm)  # the repository's own memory still goes
    for secret in (SSH_MARKER, OUTSIDE_MARKER, ANTHROPIC_KEY, OPENAI_KEY):
        assert secret not in body, f"{secret} reached the provider"
    lines = proc.stderr.splitlines()
    outside = str((layout.outside / "secret.txt").resolve())
    skipped = [line for line in lines if "skipped" in line and outside in line]
    assert skipped, proc.stderr
    assert f'add "{outside}" to memory_allowed_imports in config.toml' in skipped[0]
    refused = [line for line in lines if "refused" in line]
    assert any("id_ed25519" in line and "~/.ssh" in line for line in refused), proc.stderr
    assert any("config.toml" in line and "API keys" in line for line in refused), proc.stderr
    assert ANTHROPIC_KEY not in proc.stderr + proc.stdout


def test_an_allowed_external_import_is_read_and_a_secret_store_still_is_not(fake_llm, layout):
    notes = layout.home / "notes"
    notes.mkdir()
    (notes / "style.md").write_text("STYLE-FROM-HOME-NOTES\n")
    layout.write_config('memory_allowed_imports = ["~/notes/style.md", "~/.ssh", "../outside"]')
    (layout.repo / "AGENTS.md").write_text("@~/notes/style.md\n@../outside/secret.txt\n@~/.ssh/id_ed25519\n")
    fake_llm.enqueue(openai_text("ok"))

    proc = layout.run(fake_llm)

    assert proc.returncode == 0, proc.stderr
    system = system_prompt(fake_llm)
    assert "STYLE-FROM-HOME-NOTES" in system and OUTSIDE_MARKER in system  # a file, and a folder relative to the repo
    assert SSH_MARKER not in sent(fake_llm)  # listed, still never read
    assert "skipped" not in proc.stderr
    assert any("id_ed25519" in line and "refused" in line for line in proc.stderr.splitlines()), proc.stderr


def test_the_keys_tidegauge_holds_never_leave_in_a_request_body_whatever_brought_them(fake_llm, layout):
    # Inside the repository, so read: a key pasted into a project file, and both keys in the prompt.
    (layout.repo / "AGENTS.md").write_text(f"deploy with {ANTHROPIC_KEY} and {OPENAI_KEY}\n")
    layout.write_config('[mcp_servers.tracker]\ncommand = "tracker-mcp"\nenabled = false\n'
                        '[mcp_servers.tracker.env]\nTRACKER_TOKEN = "tracker-token-5e1d9a7b"')
    fake_llm.enqueue(openai_text("ok"))

    proc = layout.run(fake_llm, prompt=f"use {ANTHROPIC_KEY} or {OPENAI_KEY} or tracker-token-5e1d9a7b")

    assert proc.returncode == 0, proc.stderr
    body = sent(fake_llm)
    for secret in (ANTHROPIC_KEY, OPENAI_KEY, "tracker-token-5e1d9a7b"):
        assert secret not in body
    assert "deploy with [REDACTED]" in system_prompt(fake_llm)
    assert fake_llm.requests[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"  # the key itself still authenticates


def test_a_3gb_sparse_import_is_read_only_up_to_the_cap_with_a_notice(fake_llm, layout):
    big = layout.repo / "big.md"
    big.write_text("BIG-HEAD " * 40_000)  # 360 KB of text, then holes to 3 GB
    os.truncate(big, 3 * 1024 ** 3)
    (layout.repo / "AGENTS.md").write_text("@big.md\n")
    fake_llm.enqueue(openai_text("ok"))

    child = psutil.Popen(layout.command(fake_llm), cwd=layout.repo, env=layout.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    for _ in range(100_000):  # sampled until it ends (the wait below bounds it)
        try:
            peak = max(peak, child.memory_info().rss)
            if child.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        try:
            child.wait(timeout=0.01)
            break
        except psutil.TimeoutExpired:
            continue
    out, err = child.communicate(timeout=120)

    assert child.returncode == 0, err
    assert peak < 600 * 1024 ** 2, f"peak RSS {peak / 1024 ** 2:.0f} MB reading a 3 GB import"
    system = system_prompt(fake_llm)
    assert "BIG-HEAD" in system and len(system) < 300_000
    assert any("big.md" in line and "cut" in line and "3.0 GB" in line for line in err.splitlines()), err


def test_a_fifo_import_is_refused_without_blocking(fake_llm, layout):
    os.mkfifo(layout.repo / "pipe.md")  # nobody ever writes to it: a blocking open would hang
    os.symlink("/dev/zero", layout.repo / "zero.md")  # a device behind an innocent name
    (layout.repo / "AGENTS.md").write_text(f"{RULE_MARKER}\n@pipe.md\n@zero.md\n")
    fake_llm.enqueue(openai_text("ok"))

    proc = layout.run(fake_llm)

    assert proc.returncode == 0, proc.stderr
    assert RULE_MARKER in system_prompt(fake_llm)
    lines = proc.stderr.splitlines()
    assert any("pipe.md" in line and "refused" in line and "not a regular file" in line for line in lines), proc.stderr
    assert any("/dev/zero" in line and "skipped" in line for line in lines), proc.stderr


def test_a_declined_import_stays_out_and_is_said_once(fake_llm, layout):
    (layout.repo / "AGENTS.md").write_text("@../outside/secret.txt\n")
    ImportApprovals(layout.data_dir, layout.repo.resolve()).record((layout.outside / "secret.txt").resolve(), False)
    fake_llm.enqueue(openai_text("ok"))

    proc = layout.run(fake_llm)

    assert proc.returncode == 0, proc.stderr
    assert OUTSIDE_MARKER not in sent(fake_llm)
    assert [line for line in proc.stderr.splitlines() if "declined" in line] != [], proc.stderr
    assert "memory_allowed_imports" not in proc.stderr


GIT_TOKEN = "ghp_R3m0teUrlT0kenInGitConfig0123456789"
DEPLOY_TOKEN = "glpat-DeployNotesToken8x2Q"


def test_credential_files_and_imports_holding_a_credential_stay_out_through_the_real_binary(fake_llm, layout):
    # A cloned repository's AGENTS.md names the user's own local files that hold tokens: the
    # remote URL in .git/config, direnv's .envrc, and a note in the repository with a token.
    (layout.repo / ".git" / "config").write_text(
        f'[remote "origin"]\n\turl = https://x-access-token:{GIT_TOKEN}@github.com/acme/app.git\n')
    (layout.repo / ".envrc").write_text("export AWS_SECRET_ACCESS_KEY=envrc-secret-6c1d\n")
    (layout.repo / "docs").mkdir()
    (layout.repo / "docs" / "deploy.md").write_text(f"Deploy with the token {DEPLOY_TOKEN} please.\n")
    (layout.repo / "docs" / "style.md").write_text("STYLE-RULE-tabs-4a1e\n")
    (layout.repo / "AGENTS.md").write_text(
        f"{RULE_MARKER}\n@.git/config\n@.envrc\n@docs/deploy.md\n@docs/style.md\n")
    fake_llm.enqueue(openai_text("ok"))

    proc = layout.run(fake_llm, real_process=True)

    assert proc.returncode == 0, proc.stderr
    body = sent(fake_llm)
    for secret in (GIT_TOKEN, "envrc-secret-6c1d", DEPLOY_TOKEN):
        assert secret not in body, f"{secret} reached the provider"
    system = system_prompt(fake_llm)
    assert RULE_MARKER in system and "STYLE-RULE-tabs-4a1e" in system  # the harmless import still goes
    lines = proc.stderr.splitlines()
    assert any(".git/config" in line and "refused" in line and ".git folder" in line for line in lines), proc.stderr
    assert any(".envrc" in line and "refused" in line for line in lines), proc.stderr
    deploy = str((layout.repo / "docs" / "deploy.md").resolve())
    skipped = [line for line in lines if deploy in line and "skipped" in line]
    assert len(skipped) == 1 and "GitLab Token" in skipped[0], proc.stderr  # one line, saying what it looks like
    assert f'add "{deploy}" to memory_allowed_imports' in skipped[0]
    assert DEPLOY_TOKEN not in proc.stderr + proc.stdout


def test_an_import_holding_a_credential_is_read_once_the_user_allows_it(fake_llm, layout):
    (layout.repo / "docs").mkdir()
    (layout.repo / "docs" / "deploy.md").write_text(f"Deploy with the token {DEPLOY_TOKEN} please.\n")
    (layout.repo / "AGENTS.md").write_text("@docs/deploy.md\n")
    layout.write_config('memory_allowed_imports = ["docs/deploy.md"]')
    fake_llm.enqueue(openai_text("ok"))

    proc = layout.run(fake_llm)

    assert proc.returncode == 0, proc.stderr
    assert DEPLOY_TOKEN in system_prompt(fake_llm) and "skipped" not in proc.stderr


# ---- the policy and the approvals file, without a process ----

def test_the_users_own_memory_may_import_from_home_but_never_tidegauges_config(layout, monkeypatch):
    monkeypatch.setenv("HOME", str(layout.home))
    (layout.home / "notes.md").write_text("USER-NOTES\n")
    (layout.config_dir / "AGENTS.md").write_text("@~/notes.md\n@config.toml\n@~/.ssh/id_ed25519\n")
    (layout.home / "diary.md").write_text("USER-DIARY\n")
    (layout.repo / "AGENTS.md").write_text("@~/diary.md\n")  # the repository's own may not reach home
    policy = ImportPolicy.for_workspace(layout.repo, layout.config_dir, data_dir=layout.data_dir)

    bundle = load_memory(layout.repo, layout.config_dir, policy=policy)

    assert "USER-NOTES" in bundle.text and "USER-DIARY" not in bundle.text
    assert [n.path.name for n in bundle.pending] == ["diary.md"]
    assert ANTHROPIC_KEY not in bundle.text and SSH_MARKER not in bundle.text
    assert {n.path.name for n in bundle.notices if n.action == "refused"} == {"config.toml", "id_ed25519"}


def test_secrets_inside_the_repository_are_refused_too(layout):
    (layout.repo / ".env").write_text("DATABASE_PASSWORD=env-secret-3b9f\n")
    (layout.repo / "deploy_key").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nkey-body-8d2c\n")
    (layout.repo / ".env.example").write_text("DATABASE_PASSWORD=change-me\n")
    (layout.repo / "AGENTS.md").write_text("@.env\n@deploy_key\n@.env.example\n")

    bundle = load_memory(layout.repo, layout.config_dir)

    assert "env-secret-3b9f" not in bundle.text and "key-body-8d2c" not in bundle.text
    assert "change-me" in bundle.text  # an example of the variables is no secret
    refused = {n.path.name: n.reason for n in bundle.notices if n.action == "refused"}
    assert refused.keys() == {".env", "deploy_key"} and "private key" in refused["deploy_key"]


# What the README's Security section lists as never imported, approved or not.
NEVER_IMPORTED = (".git/config", ".git/FETCH_HEAD", ".git-credentials", ".envrc", ".netrc", ".npmrc", ".pypirc",
                  ".yarnrc.yml", ".pgpass", ".vault-token", ".docker/config.json", ".aws/credentials",
                  ".aws/config", ".kube/config", "server.pem", "tls.key", "keystore.jks", "id_rsa", "id_ed25519",
                  "terraform.tfvars", "prod.auto.tfvars", "terraform.tfstate", "terraform.tfstate.backup",
                  "secrets.yaml", "secrets.json", "prod.env", ".env.local")


@pytest.mark.parametrize("name", NEVER_IMPORTED)
def test_files_that_commonly_hold_credentials_are_never_imported_even_when_allowed(layout, name):
    target = layout.repo / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("plain-looking-text-7b3e\n")  # no credential shape: refused by its name alone
    (layout.repo / "AGENTS.md").write_text(f"@{name}\n")
    policy = ImportPolicy.for_workspace(layout.repo, layout.config_dir, allowed=[layout.repo])

    bundle = load_memory(layout.repo, layout.config_dir, policy=policy)

    assert "plain-looking-text-7b3e" not in bundle.text
    assert [n.action for n in bundle.notices] == ["refused"]


def test_a_rule_file_holding_a_credential_waits_and_examples_of_names_do_not(layout):
    rules = layout.repo / ".agents" / "rules"
    rules.mkdir(parents=True)
    (rules / "ci.md").write_text("Use https://deploy:s3cr3t-pa55-91c@ci.example.com/hook to deploy.\n")
    (rules / "style.md").write_text("Read the api_key from the environment; never commit a password.\n"
                                    "Commit 3f2a9c1e8b7d6f5a4c3b2a1908f7e6d5c4b3a291 fixed it.\n")

    bundle = load_memory(layout.repo, layout.config_dir)

    assert "s3cr3t-pa55-91c" not in bundle.text and "never commit a password" in bundle.text
    asked = [n for n in bundle.pending]
    assert [n.path.name for n in asked] == ["ci.md"] and "Basic Auth" in asked[0].reason


def test_answers_are_kept_per_project_in_a_file_only_the_user_can_read(tmp_path: Path):
    target = tmp_path / "outside" / "style.md"
    ImportApprovals(tmp_path / "data", tmp_path / "repo-a").record(target, True)
    ImportApprovals(tmp_path / "data", tmp_path / "repo-a").record(tmp_path / "other.md", False)

    assert stat.S_IMODE((tmp_path / "data" / APPROVALS_FILE).stat().st_mode) == 0o600
    assert ImportApprovals(tmp_path / "data", tmp_path / "repo-a").decisions() == ({target}, {tmp_path / "other.md"})
    assert ImportApprovals(tmp_path / "data", tmp_path / "repo-b").decisions() == (set(), set())
    (tmp_path / "data" / APPROVALS_FILE).write_text("{not json")  # damaged: asked again, never approved
    assert ImportApprovals(tmp_path / "data", tmp_path / "repo-a").decisions() == (set(), set())


def test_a_bad_allowed_import_is_one_line_naming_the_setting(layout, monkeypatch):
    from app.wiring.config import load_settings
    from app.kernel.errors import ConfigError

    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(layout.config_dir))
    with pytest.raises(ConfigError) as caught:
        load_settings({"memory_allowed_imports": ["~/notes.md", " "]})
    message = str(caught.value)
    assert "memory_allowed_imports" in message and "empty path" in message and "\n" not in message
    assert ANTHROPIC_KEY not in message


def test_the_answer_crosses_the_session_pipe_unchanged():
    from app.kernel.commands import ApproveImport
    from app.session.process import decode_command, encode_command

    answer = ApproveImport("/home/me/notes/style.md", True)
    assert decode_command(encode_command(answer)) == answer


def test_a_workspace_tidegauge_made_in_its_data_directory_reads_its_own_memory_files(tmp_path: Path):
    # The demo's scratch project lives under the data directory: its AGENTS.md was refused at
    # every start with a warning a new user could do nothing about. The session files beside
    # the workspace (transcript, approvals) stay out of reach.
    data_dir = tmp_path / "data"
    session = data_dir / "sessions" / "20261202-000000-abcd"
    workspace = session / "workspace"
    workspace.mkdir(parents=True)
    (session / "transcript.jsonl").write_text('{"kind": "user", "text": "TRANSCRIPT-LINE"}\n')
    (data_dir / "import-approvals.json").write_text('{"APPROVALS-FILE": true}\n')
    (workspace / "AGENTS.md").write_text("DEMO-RULES\n@../transcript.jsonl\n@../../../import-approvals.json\n")
    policy = ImportPolicy.for_workspace(workspace, tmp_path / "config", data_dir=data_dir)

    bundle = load_memory(workspace, tmp_path / "config", policy=policy)

    assert "DEMO-RULES" in bundle.text
    assert "TRANSCRIPT-LINE" not in bundle.text and "APPROVALS-FILE" not in bundle.text
    refused = {n.path.name for n in bundle.notices if n.action == "refused"}
    assert refused == {"transcript.jsonl", "import-approvals.json"}
    assert not any(n.path.name == "AGENTS.md" for n in bundle.notices)


def test_a_link_in_the_scratch_workspace_to_the_sessions_own_files_is_still_refused(tmp_path: Path):
    # Attacker's view of the exception above: a file in the scratch workspace that links to the
    # transcript beside it (or to the data directory's approvals) is resolved first, so it is
    # outside the workspace and stays refused, whatever name it has.
    data_dir = tmp_path / "data"
    session = data_dir / "sessions" / "20261202-000000-abcd"
    workspace = session / "workspace"
    workspace.mkdir(parents=True)
    (session / "transcript.jsonl").write_text('{"kind": "user", "text": "TRANSCRIPT-LINE"}\n')
    (data_dir / "import-approvals.json").write_text('{"APPROVALS-FILE": true}\n')
    (workspace / "notes.md").symlink_to(session / "transcript.jsonl")
    (workspace / "CLAUDE.md").symlink_to(data_dir / "import-approvals.json")
    (workspace / "AGENTS.md").write_text("DEMO-RULES\n@notes.md\n")
    policy = ImportPolicy.for_workspace(workspace, tmp_path / "config", data_dir=data_dir)

    bundle = load_memory(workspace, tmp_path / "config", policy=policy)

    assert "DEMO-RULES" in bundle.text
    assert "TRANSCRIPT-LINE" not in bundle.text and "APPROVALS-FILE" not in bundle.text
    refused = {n.path.name for n in bundle.notices if n.action == "refused"}
    assert {"transcript.jsonl", "import-approvals.json"} <= refused
