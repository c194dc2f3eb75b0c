"""Settings: CLI flags > environment (``TIDEGAUGE_*``) > ``config.toml`` > defaults.

``load_settings`` is the one entry point for the CLI: any bad value, from
whichever source, becomes a single ``ConfigError`` line naming the setting,
what was wrong and where the value came from, never a traceback.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import tomllib

from pydantic import BaseModel, ConfigDict, Field, create_model, PrivateAttr, SecretStr, ValidationError, ValidationInfo, field_validator

from app.kernel.json_depth import json_too_deep
from app.providers.factory import (  # the providers' key variables: one list; the plug-ins' settings
    PROVIDER_KEY_ENV,
    PROVIDER_NAMES,
    PROVIDER_PLUGINS,
    default_key_env,
    DEFAULT_BASE_URLS,
    keyless_plugin,
    plugin_options,
    provider_for_model,
)
from app.kernel.errors import ConfigError  # raised here; the CLI imports it from app.kernel.errors
from app.mcp.settings import McpServerConfig, check_server_names  # MCP servers
from app.tools.base import (  # the tools' hard limits
    DEFAULT_MAX_SAVED_OUTPUT,
    DEFAULT_MAX_SESSION_SAVED_OUTPUT,
    DEFAULT_READ_MAX_BYTES,
)
from app.kernel.redact import redact, register_env_var, register_secret
from app.agent.permissions import RuleError, parse_rule, split_rule_list  # permission rules

APP_NAME = "tidegauge"
ENV_PREFIX = "TIDEGAUGE_"
CONFIG_DIR_ENV = "TIDEGAUGE_CONFIG_DIR"
CONFIG_FILE_NAME = "config.toml"

# Order of the automatic choice when no provider is configured.
AUTO_PROVIDER_ORDER: tuple[str, ...] = ("anthropic", "openai", "deepseek")
PRICE_FIELDS = frozenset({"input", "cached_input", "cache_write", "output"})


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Prefixes of the provider keys people paste (OpenAI, Anthropic, DeepSeek, Groq, xAI, Google...).
_KEY_PREFIXES = ("sk-", "sk_", "sess-", "gsk_", "xai-", "AIza", "pk-", "rk-", "key-")


def looks_like_a_key(value: str) -> bool:
    """True for a value that is probably a secret rather than a variable name."""
    text = value.strip()
    if text.startswith(_KEY_PREFIXES):
        return True
    if len(text) >= 24 and not _ENV_NAME.match(text):
        return True
    # a long run of mixed-case letters and digits, as keys are and variable names are not
    return (len(text) >= 32 and any(c.isdigit() for c in text) and any(c.islower() for c in text)
            and any(c.isupper() for c in text))


def config_dir_path() -> Path:
    """The user's config dir (``TIDEGAUGE_CONFIG_DIR`` overrides the platform default)."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override).expanduser()
    # Imported here: a run given its folders (TIDEGAUGE_CONFIG_DIR, TIDEGAUGE_DATA_DIR, as every test
    # and script run is) never needs the platform's defaults, and the import was ~1% of its start.
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME))


def config_file_path() -> Path:
    return config_dir_path() / CONFIG_FILE_NAME


def default_data_dir() -> Path:
    import platformdirs  # only for the default folder: see config_dir_path

    return Path(platformdirs.user_data_dir(APP_NAME))


class PermissionRules(BaseModel):
    """``[permissions]`` in config.toml: lists of rules such as ``run_bash(git status:*)``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built with the settings, when they are read
    # A list default is [] and not default_factory=list: pydantic copies an unhashable default for each
    # model, and asking the signature of the builtin list (whether a factory takes the data) parses its
    # text signature with tokenize's patterns, a few ms of every run that builds the model.
    allow: list[str] = []
    ask: list[str] = []
    deny: list[str] = []

    @field_validator("allow", "ask", "deny")
    @classmethod
    def _rules_parse(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for text in value:
            parse_rule(text, info.field_name, "config")  # type: ignore[arg-type]  # RuleError is a ValueError
        return value


def _check_rule_flag(value: list[str]) -> list[str]:
    for text in split_rule_list(value):
        try:
            parse_rule(text, "allow", "flag")
        except RuleError as error:
            raise ValueError(str(error)) from None
    return value


class Settings(BaseModel):
    """Every setting. ``Settings(**flags)`` reads the environment and config.toml too
    (``_from_sources``): read by hand, as pydantic-settings read them, because importing it and
    its sources was a twentieth of a headless run's start before its first request."""

    model_config = ConfigDict(
        extra="forbid",
        # Built when first read: a run reads settings_class(), the subclass with the plug-ins'
        # settings, and building this base too at import was one validator too many before the first request.
        defer_build=True,
    )

    # None = automatic: see resolve_provider.
    provider: str | None = None  # a built-in or a plug-in of app.providers.factory
    model: str | None = None
    base_url: str | None = None
    # Name of the environment variable that holds the API key.
    api_key_env: str | None = None
    max_output: int = Field(40_000, ge=0)  # 0 disables truncation
    max_steps: int = Field(50, ge=1)
    # tool calls run from one model reply; the rest are answered "not run"
    max_tool_calls_per_turn: int = Field(64, ge=1)
    budget: int = Field(150_000, ge=0)  # 0 = no budget cap
    window: int | None = Field(None, ge=1000)
    compact_max_output: int = Field(8_000, ge=1)
    max_tokens: int = Field(16_000, ge=1)
    yes: bool = False
    allow_outside: bool = False
    # run_bash's commands in bubblewrap (app/tools/sandbox.py): "auto" when bwrap works here (one line
    # at start says when it does not), "on" refuses commands without it, "off" never; the network
    # inside only with sandbox_network.
    sandbox: Literal["auto", "on", "off"] = "auto"
    sandbox_network: bool = False
    timeout_connect: float = Field(10, gt=0, allow_inf_nan=False)
    timeout_read: float = Field(120, gt=0, allow_inf_nan=False)
    max_retries: int = Field(4, ge=0)
    # model-prefix -> {input, cached_input, cache_write, output} in USD per million tokens
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    data_dir: Path = Field(default_factory=default_data_dir)
    # Tool hardening: the saved full output of one tool call stops growing
    # here (its tail is still kept), and read_file consumes at most this many bytes
    # per call. Both reach the tools through ToolContext.
    max_saved_output: int = Field(DEFAULT_MAX_SAVED_OUTPUT, ge=1024)
    read_max_bytes: int = Field(DEFAULT_READ_MAX_BYTES, ge=1024)
    # All saved outputs of one session (its sub-agents' too); past it outputs are still cut, not saved.
    max_session_saved_output: int = Field(DEFAULT_MAX_SESSION_SAVED_OUTPUT, ge=0)
    # Keys written by hand under [api_keys] in config.toml (kept 0600); environment variables win.
    api_keys: dict[str, SecretStr] = Field(default_factory=dict)
    # Session memory: a background summary, as Claude Code's: the first once the context reaches
    # memory_init_tokens, then after memory_update_tokens of new context and memory_update_tool_calls
    # tool calls (or a reply that called none) (memory_update_tokens 0: off); a compaction from it
    # keeps at least the last memory_keep_tokens verbatim. On a short session an update cost as much
    # as the work it summarised.
    memory_init_tokens: int = Field(10_000, ge=0)
    memory_update_tokens: int = Field(5_000, ge=0)
    memory_update_tool_calls: int = Field(3, ge=0)
    memory_keep_tokens: int = Field(4_000, ge=0)
    # Memory imports and rule files outside the repository read without asking:
    # files or folders, "~" allowed, relative ones from the repository's root. Secret stores
    # and tidegauge's own config are refused even when listed here.
    memory_allowed_imports: list[str] = []

    # MCP servers: one [mcp_servers.NAME] table per server, started with the
    # session; and the share of the window over which MCP tool definitions are deferred
    # (only names and one-line descriptions sent, plus load_tools for the full schemas).
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    tool_defer_share: float = Field(0.10, ge=0, le=1)
    # Sub-agents: the task tool's step limit and the size of the report it returns.
    subagents: bool = True  # offer the task tool (a sub-agent in a fresh context)
    subagent_max_steps: int = Field(20, ge=1)
    subagent_report_tokens: int = Field(2_000, ge=100)
    # Permission rules (app/agent/permissions.py): [permissions] allow/ask/deny in
    # config.toml; --allowed-tools / --disallowed-tools add allow / deny rules for one run.
    permissions: PermissionRules = Field(default_factory=PermissionRules)
    allowed_tools: list[str] = []  # [] not default_factory=list: see PermissionRules
    disallowed_tools: list[str] = []

    @field_validator("allowed_tools", "disallowed_tools")
    @classmethod
    def _tool_rules_parse(cls, value: list[str]) -> list[str]:
        return _check_rule_flag(value)

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_server_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        return check_server_names(value)
    # --- model parameters (branch providers) ---
    # Anthropic extended thinking: budget_tokens per request, 0 = off (the API's minimum is 1024).
    thinking_budget: int = Field(0, ge=0)
    # OpenAI: send "max_completion_tokens" instead of "max_tokens" (None: by model name).
    max_completion_tokens: bool | None = None
    # Anthropic: cache_control breakpoints on tools, system prompt and the latest messages
    # (None: on for every Anthropic-protocol server; one that rejects them is retried without, and caching
    # stays off for the session).
    prompt_caching: bool | None = None
    # ---- provider-side context management (applied by app/agent/server_context.py) ----
    # Let the server compact (Responses: context_management compaction; Anthropic: compact_20260112)
    # at the auto-compact line instead of our own compaction. Off: ours is auditable and works everywhere.
    server_compaction: bool = False
    # Anthropic context editing: clear old tool uses server-side (clear_tool_uses_20250919).
    anthropic_clear_tool_uses: bool = False
    anthropic_clear_tool_uses_trigger: int | None = Field(None, ge=1)  # input tokens; None: the server's 100,000
    anthropic_clear_tool_uses_keep: int | None = Field(None, ge=0)  # newest tool uses kept; None: the server's 3
    anthropic_clear_tool_uses_clear_at_least: int | None = Field(None, ge=1)  # input tokens; None: no minimum
    anthropic_clear_tool_uses_exclude: list[str] = []  # tool names never cleared
    # Anthropic context editing: clear thinking of older turns (clear_thinking_20251015).
    anthropic_clear_thinking: bool = False
    anthropic_clear_thinking_keep: int | None = Field(None, ge=1)  # newest thinking turns kept; None: the server's 1

    # Bounded resources: what one model call may cost at most. A server cannot
    # make tidegauge hold unbounded memory or wait forever (keep-alives do not extend the
    # deadline). Finite and positive; defaults in app.providers.sse (StreamLimits).
    request_deadline: float = Field(900.0, gt=0, allow_inf_nan=False)  # seconds per model call
    max_sse_line: int = Field(8 * 1024 * 1024, ge=1024)  # characters of one SSE line / event
    max_response_body: int = Field(64 * 1024 * 1024, ge=1024)  # bytes of a non-streamed body, decompressed
    max_reply_chars: int = Field(32 * 1024 * 1024, ge=1024)  # text + thinking + tool arguments of one reply
    # --web: the port the browser dashboard is served on (127.0.0.1 unless --web-host; 0: any free port)
    web_port: int = Field(8765, ge=0, le=65535)
    # --web: browser tabs served at once, each a dashboard process (a further tab is refused and told why)
    web_max_tabs: int = Field(4, ge=1, le=64)

    _config_dir: Path = PrivateAttr(default_factory=config_dir_path)

    def __init__(self, **flags: Any) -> None:
        super().__init__(**_from_sources(type(self), flags, _read_toml(config_file_path())))

    @field_validator("provider")
    @classmethod
    def _provider_is_known(cls, value: str | None) -> str | None:
        if value is not None and value not in PROVIDER_NAMES:
            raise ValueError(f"must be one of {', '.join(repr(name) for name in PROVIDER_NAMES)} (got {value!r})")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url_is_a_url(cls, value: str | None) -> str | None:
        # Refused at start, before a session exists: a malformed address would otherwise fail at
        # the first model call and leave an empty session behind. The value is not echoed when it
        # could hold a password (user:secret@host).
        if value is None or value == "":
            return None
        text = value.strip()
        shown = "" if "@" in text else f" (got {text[:60]!r})"
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError(f"not a valid URL{shown}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in text):
            raise ValueError(f"must be an http:// or https:// address with a host, "
                             f"e.g. http://localhost:8080/v1{shown}")
        return text

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_default(cls, value: Any) -> Any:
        if value is None or value == "":
            return default_data_dir()
        if isinstance(value, (str, Path)):
            return Path(value).expanduser()
        return value

    @field_validator("thinking_budget")
    @classmethod
    def _thinking_budget_minimum(cls, value: int, info: ValidationInfo) -> int:
        if 0 < value < 1024:
            raise ValueError(f"must be 0 (off) or at least 1024, the API's minimum (got {value})")
        max_tokens = info.data.get("max_tokens")
        if value and isinstance(max_tokens, int) and value >= max_tokens:
            # the API wants budget_tokens < max_tokens: every request would go without thinking
            raise ValueError(f"must be below max_tokens ({max_tokens}) (got {value})")
        return value

    @field_validator("memory_allowed_imports")
    @classmethod
    def _allowed_imports_are_paths(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry.strip():
                raise ValueError("an empty path; list files or folders, e.g. [\"~/notes/style.md\"]")
            if "\0" in entry:
                raise ValueError(f"{entry!r} is not a path (it holds a NUL character)")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _key_env_is_a_name(cls, value: str | None) -> str | None:
        # The name of a variable, never the key itself: a key pasted here would be echoed in
        # errors and stored in config.toml. The message must not repeat it.
        if value is None or value == "":
            return None
        if looks_like_a_key(value):
            raise ValueError("looks like an API key, not the name of an environment variable; "
                             "pass the variable's name (e.g. MY_API_KEY) and put the key in it")
        if not _ENV_NAME.match(value):
            raise ValueError("must be the name of an environment variable (letters, digits and _)")
        return value

    @field_validator("data_dir")
    @classmethod
    def _data_dir_is_a_folder(cls, value: Path) -> Path:
        if value.exists() and not value.is_dir():
            raise ValueError(f"{value} is a file, not a folder")
        return value

    @field_validator("prices")
    @classmethod
    def _known_price_fields(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for prefix, table in value.items():
            unknown = sorted(set(table) - PRICE_FIELDS)
            if unknown:
                raise ValueError(
                    f"{prefix}: unknown price {unknown[0]!r} (expected {', '.join(sorted(PRICE_FIELDS))})"
                )
            for name, price in table.items():
                if not math.isfinite(price):  # TOML has inf and nan: a cost of nan is no JSON number
                    raise ValueError(f"{prefix}.{name}: must be a finite number (got {price})")
                if price < 0:
                    raise ValueError(f"{prefix}.{name}: must be >= 0 (got {price})")
        return value

    @field_validator("api_keys")
    @classmethod
    def _known_key_providers(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for provider, key in value.items():
            register_secret(key.get_secret_value())
            if provider not in PROVIDER_KEY_ENV:
                raise ValueError(f"unknown provider {provider!r} (expected {', '.join(PROVIDER_KEY_ENV)})")
        return value

    @property
    def config_dir(self) -> Path:
        """The directory whose config.toml was read."""
        return self._config_dir

    @property
    def config_file(self) -> Path:
        return self._config_dir / CONFIG_FILE_NAME

    @property
    def data_dir_path(self) -> Path:
        """``data_dir`` (always set after validation; kept for callers that use this name)."""
        return self.data_dir


# ---------------------------------------------------------------- loading

def load_settings(overrides: dict[str, Any] | None = None) -> Settings:
    """Settings from CLI overrides (None values dropped), env, config.toml, defaults.

    Raises ConfigError with one line, e.g.
    ``config: max_steps: must be >= 1 (got 0) [from --max-steps]``.
    """
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    path = config_file_path()
    check_config_trust(path)  # before anything of it is read, let alone obeyed
    toml_data = _read_toml(path)
    cls = settings_class()
    try:
        # model_validate, not cls(**cli): the file is read once, and what is validated is what was read.
        return cls.model_validate(_from_sources(cls, cli, toml_data))
    except ValidationError as err:
        raise ConfigError(_describe_validation_error(err, cli, toml_data, path)) from None


def _from_sources(cls: type[Settings], flags: dict[str, Any], toml_data: dict[str, Any]) -> dict[str, Any]:
    """What the settings are validated from: the flags over the environment over config.toml,
    tables merged key by key (a table in the environment adds to the file's), as pydantic-settings
    merged its sources. Raises ConfigError for an environment value that is not the JSON a list
    or table setting needs."""
    return _merged(_merged(toml_data, _environment_values(cls)), flags)


def _merged(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(under)
    for key, value in over.items():
        below = merged.get(key)
        merged[key] = _merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return merged


# Deeper than any setting's shape (a table of tables of lists): what is deeper is refused
# before it is parsed.
MAX_SETTING_DEPTH = 16


def _environment_values(cls: type[Settings]) -> dict[str, Any]:
    """``TIDEGAUGE_<SETTING>`` for each setting, the name in any case; an empty value is no value.
    A list or table setting is JSON (``TIDEGAUGE_ALLOWED_TOOLS='["read_file"]'``)."""
    environment = {name.lower(): value for name, value in os.environ.items()}
    values: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        env_name = ENV_PREFIX + name.upper()
        value: Any = environment.get(env_name.lower())
        if not value:
            continue
        complex_kind = _json_kind(field.annotation)
        if complex_kind is not None:
            if json_too_deep(value, MAX_SETTING_DEPTH):  # json.loads recurses once per level
                raise ConfigError(f"config: {name}: nests deeper than {MAX_SETTING_DEPTH} levels [from {env_name}]")
            try:
                value = json.loads(value)
            except ValueError:
                if complex_kind == "required":
                    raise ConfigError(redact(f"config: {name}: not valid JSON [from {env_name}]")) from None
        values[name] = value
    return values


def _json_kind(annotation: Any) -> Literal["required", "optional"] | None:
    """Whether an environment value of a setting of this type is JSON: "required" for a list, a
    table or a model; "optional" for a union of one with a plain type (a value that is not JSON
    is then taken as it is); None for a plain type (a string, a number, a path, a choice)."""
    origin = get_origin(annotation)
    if origin is Union or origin is UnionType:
        kinds = [_json_kind(arg) for arg in get_args(annotation) if arg is not type(None)]
        if "required" in kinds or "optional" in kinds:
            return "required" if all(kind is not None for kind in kinds) else "optional"
        return None
    if origin in (list, dict, set, frozenset, tuple) or annotation in (list, dict, set, frozenset, tuple):
        return "required"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "required"
    return None


@functools.cache
def settings_class() -> type[Settings]:
    """``Settings`` with the settings the provider plug-ins add (``PluginOption``): read from
    config.toml, the environment and the flags like the others, for whichever provider."""
    fields: dict[str, Any] = {
        option.name: (float, Field(option.default, ge=option.minimum, allow_inf_nan=False))
        for option in plugin_options()
    }
    if not fields:
        return Settings
    return create_model("Settings", __base__=Settings, **fields)


def check_config_trust(path: Path) -> None:
    """Refuse a config file someone else could have written, as ssh does (StrictModes).

    config.toml starts programs (``[mcp_servers]`` commands) and points at keys: a file
    writable by group or others, owned by another user, or in a folder (any folder up
    to /) that another user could write without the sticky bit, could have been written
    by them. Raises ConfigError with one line naming the file and the fix. A missing
    file is nothing to trust. Root's files and folders are trusted, as ssh trusts them.
    """
    if os.name != "posix":
        return
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise ConfigError(f"config: {path}: cannot read ({err.strerror or err})") from None
    me = os.geteuid()
    refuse = f"config: refusing {path}"
    if info.st_uid not in (me, 0):
        raise ConfigError(f"{refuse}: it is owned by another user (uid {info.st_uid}); "
                          f"fix: chown {_user_name(me)} {path} (and check what it holds)")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise ConfigError(f"{refuse}: others can write it (mode {mode:04o}); fix: chmod go-w {path}")
    for folder in _folders_holding(path):
        try:
            held = os.stat(folder)
        except OSError:
            continue
        folder_mode = stat.S_IMODE(held.st_mode)
        if held.st_uid not in (me, 0):
            raise ConfigError(f"{refuse}: its folder {folder} is owned by another user (uid {held.st_uid}); "
                              f"fix: move the config (TIDEGAUGE_CONFIG_DIR) or chown {_user_name(me)} {folder}")
        if folder_mode & 0o022 and not folder_mode & stat.S_ISVTX:
            raise ConfigError(f"{refuse}: others can write its folder {folder} (mode {folder_mode:04o}) "
                              f"and replace it; fix: chmod go-w {folder}")


def _folders_holding(path: Path) -> list[Path]:
    """Every folder from the file's up to /, for the path as given and as its symlinks resolve."""
    folders: list[Path] = []
    for start in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        for folder in start.parents:
            if folder not in folders:
                folders.append(folder)
    return folders


def _user_name(uid: int) -> str:
    try:
        import pwd  # inside the try: POSIX only

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise ConfigError(f"config: {path}: cannot read ({err.strerror or err})") from None
    # Imported when there is a file to parse: a run without config.toml never loads the parser.
    import tomllib

    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config: {path}: invalid TOML (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(_describe_toml_error(path, err)) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigError(f"config: {path}: invalid TOML (nested too deeply)") from None


def _describe_toml_error(path: Path, err: tomllib.TOMLDecodeError) -> str:
    message = str(err)
    match = re.search(r"\(at line (\d+), column \d+\)", message)
    reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", message).strip()
    if match:
        where = f" at line {match.group(1)}"
    elif "end of document" in message:
        where = " at the end of the file"
    else:
        where = ""
    detail = f" ({reason[0].lower()}{reason[1:]})" if reason else ""
    return redact(f"config: {path}: invalid TOML{where}{detail}")


def _describe_validation_error(
    err: ValidationError, cli: dict[str, Any], toml_data: dict[str, Any], path: Path
) -> str:
    parts: list[str] = []
    for error in err.errors():
        loc = [str(p) for p in error.get("loc", ())]
        field = loc[0] if loc else "?"
        name = ".".join(loc) if loc else "?"
        if field == "api_keys":  # never echo a key back, even a malformed one
            got = ""
        else:
            got = _got(error)
        problem = _problem(error)
        source = _source_of(field, cli, toml_data, path)
        parts.append(f"{name}: {problem}{got} [from {source}]")
    return redact("config: " + "; ".join(parts))


def _number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _problem(error: Any) -> str:
    kind = error.get("type", "")
    ctx = {k: _number(v) for k, v in (error.get("ctx") or {}).items()}
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}"
    if kind == "greater_than":
        return f"must be > {ctx.get('gt')}"
    if kind == "less_than_equal":
        return f"must be <= {ctx.get('le')}"
    if kind == "less_than":
        return f"must be < {ctx.get('lt')}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "must be a whole number"
    if kind in ("float_parsing", "float_type"):
        return "must be a number"
    if kind in ("bool_parsing", "bool_type"):
        return "must be true or false"
    if kind == "string_type":
        return "must be a string"
    if kind in ("dict_type", "model_type"):
        return "must be a table"
    if kind == "extra_forbidden":
        return "unknown setting"
    if kind == "value_error":
        message = str(error.get("msg", ""))
        return message.removeprefix("Value error, ")
    message = str(error.get("msg", "invalid value"))
    return message[:1].lower() + message[1:]


def _got(error: Any) -> str:
    if error.get("type") in ("extra_forbidden", "value_error", "missing"):
        return ""
    value = error.get("input")
    if isinstance(value, (dict, list)):
        return ""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f" (got {shown})"


def _source_of(field: str, cli: dict[str, Any], toml_data: dict[str, Any], path: Path) -> str:
    if field in cli:
        return "--" + field.replace("_", "-")
    env_name = ENV_PREFIX + field.upper()
    if any(k.upper() == env_name and v for k, v in os.environ.items()):
        return env_name
    if field in toml_data:
        return str(path)
    return "default"


# ---------------------------------------------------------------- providers and keys

def exposed_keys_warning(settings: Settings) -> str | None:
    """config.toml holds API keys but others may read it (as ssh says of a private key)."""
    if not settings.api_keys:
        return None
    try:
        mode = settings.config_file.stat().st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o077:
        return None
    return (f"{settings.config_file} holds API keys and is readable by others (mode {mode:04o}):"
            f" chmod 600 {settings.config_file}")


def resolve_provider(settings: Settings) -> str:
    """The configured provider, else the first of anthropic/openai/deepseek with a key, else the
    provider of what was asked for (``--model``'s maker, or an OpenAI-compatible server at
    ``--base-url``), else the first plug-in that needs no key (the demo), else anthropic (which
    then asks for its key).

    The keyless demo is chosen only when nothing was asked for: a script that names a model or a
    server and gets canned answers instead could not tell. Keys in the environment are looked at
    first, then keys saved in config.toml.
    """
    if settings.provider is not None:
        return settings.provider
    for provider in AUTO_PROVIDER_ORDER:
        if os.environ.get(PROVIDER_KEY_ENV[provider]):
            return provider
    for provider in AUTO_PROVIDER_ORDER:
        saved = settings.api_keys.get(provider)
        if saved is not None and saved.get_secret_value():
            return provider
    if settings.model or settings.base_url or settings.api_key_env:
        by_model = provider_for_model(settings.model or "")
        if by_model is not None:
            return by_model
        # a model no maker's name matches, or a server: the OpenAI-compatible protocol, which local
        # servers (llama.cpp, Ollama, vLLM, LM Studio) speak
        return "openai" if (settings.model or settings.base_url) else AUTO_PROVIDER_ORDER[0]
    return keyless_plugin() or AUTO_PROVIDER_ORDER[0]


def demo_chosen_for_want_of_a_key(settings: Settings) -> bool:
    """Whether the keyless plug-in (the demo) runs only because nothing else was asked for."""
    return settings.provider is None and needs_no_key(resolve_provider(settings))


def at_own_server(settings: Settings, provider: str) -> bool:
    """``--base-url`` names a server other than the provider's public API (a local server needs no key)."""
    if not settings.base_url:
        return False
    return settings.base_url.rstrip("/") != DEFAULT_BASE_URLS.get(provider, "").rstrip("/")


def missing_key_problem(settings: Settings, provider: str) -> str | None:
    """One line when ``provider`` needs an API key and none is set: what was asked and the variable
    to set; None when a key is there or none is needed (a keyless plug-in, a server of one's own)."""
    if needs_no_key(provider) or at_own_server(settings, provider) or api_key_for(settings, provider):
        return None
    variable = settings.api_key_env or PROVIDER_KEY_ENV.get(provider) or provider.upper() + "_API_KEY"
    if settings.provider is None and settings.model:
        asked = f"--model {settings.model} (provider {provider})"
    else:
        asked = f"provider {provider}"
    local = "" if settings.api_key_env else ", or --base-url URL for a server of your own"
    return f"{asked}: no API key (set {variable}{local})"


def needs_no_key(provider: str) -> bool:
    """A plug-in that declares it needs no API key (the demo)."""
    return provider in PROVIDER_PLUGINS and not default_key_env(provider)


def key_env_name(settings: Settings, provider: str) -> str | None:
    """The environment variable the key for ``provider`` is read from (None: it needs none)."""
    if needs_no_key(provider):
        return None
    if settings.api_key_env:
        return settings.api_key_env
    return PROVIDER_KEY_ENV.get(provider)


def api_key_for(settings: Settings, provider: str) -> str | None:
    """The API key for ``provider``: ``api_key_env``'s variable, else the standard one, else config.toml.

    The key found is registered for redaction. None when it needs none or there is none.
    """
    if needs_no_key(provider):
        return None
    if settings.api_key_env:
        register_env_var(settings.api_key_env)
        key = os.environ.get(settings.api_key_env) or None
    else:
        env_name = PROVIDER_KEY_ENV.get(provider)
        key = os.environ.get(env_name) if env_name else None
        if not key:
            saved = settings.api_keys.get(provider)
            key = saved.get_secret_value() if saved is not None else None
    key = key.strip() if key else None
    if key:
        register_secret(key)
    return key or None


def provider_key_env_names(settings: Settings | None = None) -> set[str]:
    """Environment variables that hold provider keys: stripped from run_bash's environment."""
    names = set(PROVIDER_KEY_ENV.values())
    if settings is not None and settings.api_key_env:
        names.add(settings.api_key_env)
    return names


