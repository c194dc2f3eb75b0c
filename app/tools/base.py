"""The tool contract. Tools return raw output; the registry truncates it.

A built-in tool declares its arguments once, as a pydantic model: the model
gives the JSON schema the LLM sees (``ToolSpec.input_schema``), the validation,
and the one-line error the LLM gets back on bad arguments. Tools that bring
their own schema (from elsewhere) can still implement ``Tool`` directly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType
from typing import Any, Callable, ClassVar, Generic, Protocol, TypeVar, Union, get_args, get_origin


from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from app.kernel.messages import ToolResultImage, ToolSpec
from app.tools.sandbox import SandboxPolicy

# Saved full outputs stop growing here (the tail beyond it is still kept); see registry.
DEFAULT_MAX_SAVED_OUTPUT = 1024**3
# All the full outputs one session saves (its sub-agents' too) stop here; see SavedOutputBudget.
DEFAULT_MAX_SESSION_SAVED_OUTPUT = 1024**3
# read_file consumes at most this many bytes for the lines it returns.
DEFAULT_READ_MAX_BYTES = 4 * 1024 * 1024


class ToolInputError(Exception):
    """Bad arguments or a refused path; the message tells the model what to do next."""


@dataclass
class SavedOutputBudget:
    """The bytes one session's saved full outputs may take (``max_session_saved_output``).

    ``max_saved_output`` caps one call; three calls at that cap wrote 3.1 GB. One budget is
    shared by a session's agent and its sub-agents; the registry counts every saved file.
    """

    limit: int = DEFAULT_MAX_SESSION_SAVED_OUTPUT
    used: int = 0
    # Files counted as they were written (an MCP answer the transport cut and saved, with
    # ``take``): the registry, which counts the file a result names, skips these.
    counted_as_written: set[str] = field(default_factory=set)

    @property
    def room(self) -> int:
        return max(0, self.limit - self.used)

    def take(self, wanted: int) -> int:
        """Count up to ``wanted`` bytes about to be written; what it returns is what may be written."""
        granted = min(max(0, wanted), self.room)
        self.used += granted
        return granted

    def not_saved_note(self) -> str:
        return (f"the full output was not saved: this session's saved outputs reached their cap of "
                f"{self.limit:,} bytes (the max_session_saved_output setting raises it)")

    @classmethod
    def for_folder(cls, folder: Path, limit: int) -> SavedOutputBudget:
        """A budget for a session whose folder may already hold saved outputs (a resumed one)."""
        used = 0
        try:
            for path in folder.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    used += path.stat().st_size
        except OSError:
            pass  # an unreadable folder: count what was seen
        return cls(limit=limit, used=used)


@dataclass
class ToolContext:
    """What a tool may use. One per session; ``call_id`` is set per call."""

    workspace: Path
    tool_results_dir: Path  # <session>/tool-results: full outputs land here
    allow_outside: bool = False
    env: dict[str, str] = field(default_factory=dict)  # for run_bash: provider keys removed
    call_id: str = ""
    # Set by the engine: is the result of this earlier tool call still in the context?
    result_in_context: Callable[[str], bool] = lambda _id: False
    # app.context.file_cache.FileReadCache (typed loosely to keep tools free of the engine)
    file_cache: Any = None
    # tool hardening: Settings.max_saved_output / Settings.read_max_bytes
    max_saved_output: int = DEFAULT_MAX_SAVED_OUTPUT
    read_max_bytes: int = DEFAULT_READ_MAX_BYTES
    # Settings.max_session_saved_output; shared, not copied, when a sub-agent's context is made
    saved_output_budget: SavedOutputBudget = field(default_factory=SavedOutputBudget)
    # Set by the agent: a long tool says how far it got (call_id, progress, total, message), and
    # content meant for the user alone reaches the screen (call_id, text), never the model.
    on_progress: Callable[[str, float, float | None, str], None] = lambda _id, _done, _total, _message: None
    on_user_content: Callable[[str, str], None] = lambda _id, _text: None
    # Set by the agent: where the MCP task a call runs as stands (call_id, status, message).
    on_task_status: Callable[[str, str, str], None] = lambda _id, _status, _message: None
    # How run_bash's commands run (bwrap, or not at all when the user asked for it and it cannot).
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    # Set by the agent: the call whose request to leave the sandbox was approved (its call_id).
    approved_escape: str = ""
    # app.tools.file_history.FileHistory: the before-images a rewind restores (None: not kept)
    file_history: Any = None


@dataclass
class ToolOutput:
    """Raw output of one tool run, before the registry's truncation.

    A tool that already spilled a huge output to disk (run_bash) passes the
    path and the real size so the notice can name them; ``saved_note`` says
    when that file is not the whole output (it hit ``max_saved_output``).
    """

    text: str
    is_error: bool = False
    full_output_path: Path | None = None
    original_chars: int | None = None
    saved_note: str = ""
    # Images for the model (MCP image content); the text names each one where it stood.
    images: list[ToolResultImage] = field(default_factory=list)
    # Content for the user alone (MCP ``audience: ["user"]``): shown, never sent to the model.
    for_user: str = ""


class Tool(Protocol):
    spec: ToolSpec
    # Changes things (needs --yes or the user's approval): run_bash, write_file, edit_file.
    mutating: bool

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput: ...


# --- arguments as one pydantic model per tool ------------------------------------------


class ToolArgs(BaseModel):
    """Base of every tool's argument model.

    Lax on what models commonly get wrong but mean clearly (a number sent as
    "5" or 5.0); strict on everything else (a bool is not a number, a number is
    not a path). Unknown keys are ignored, as before.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)  # built on a first call: most runs use few tools

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: Any) -> Any:
        # pydantic accepts True as 1 for an int field; for a tool that is a mistake.
        field_info = cls.model_fields.get(info.field_name)
        if isinstance(value, bool) and field_info is not None and field_info.annotation in (int, int | None):
            raise ValueError(f"must be an integer, got {value!r}")
        if isinstance(value, str) and field_info is not None and field_info.annotation in (int, int | None):
            stripped = value.strip()
            if stripped.lstrip("-").isdigit():
                return int(stripped)
        return value


# Schema keys the model sees, in the order it saw them before the models existed.
_SCHEMA_KEYS = ("type", "minimum", "maximum", "description")


def args_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``model`` as the LLM sees it: types, bounds, descriptions, required.

    pydantic adds titles and defaults and spells optionals as anyOf; the model
    does not need them, and every token here is sent with every request.
    Generated once per model (pydantic takes milliseconds), a fresh copy each call.
    """
    if model not in _SCHEMAS:
        _SCHEMAS[model] = _build_schema(model)
    return copy.deepcopy(_SCHEMAS[model])


_SCHEMAS: dict[type[BaseModel], dict[str, Any]] = {}


# The field types and constraints a tool's arguments use, as JSON schema spells them.
_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", bool: "boolean", float: "number"}
# pydantic's constraints (annotated_types' classes, by name: the package is pydantic's to pin)
_BOUNDS = {"Ge": ("minimum", "ge"), "Le": ("maximum", "le")}
# Constraints that add no key the model sees (_SCHEMA_KEYS): length limits, strictness.
_UNSEEN_CONSTRAINTS = frozenset({"MaxLen", "MinLen", "Strict"})


def _build_schema(model: type[BaseModel]) -> dict[str, Any]:
    """What ``_schema_from_pydantic`` makes of ``model``, read from its fields when they are
    plain (a string, a number, true or false, optional or bounded): pydantic's generator needs
    the model's validator, which an argument model builds only when its tool is first called
    (ToolArgs' ``defer_build``), and building every tool's for the first request's list of tools
    was ~2% of a headless run's start. Anything else is pydantic's; a test holds the two equal."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if get_origin(annotation) in (Union, UnionType):
            options = [arg for arg in get_args(annotation) if arg is not type(None)]
            annotation = options[0] if len(options) == 1 and len(get_args(annotation)) == 2 else None
        json_type = _JSON_TYPES.get(annotation)
        extra = info.json_schema_extra
        if json_type is None or info.alias is not None or not (extra is None or isinstance(extra, dict)):
            return _schema_from_pydantic(model)
        prop: dict[str, Any] = {"type": json_type}
        for constraint in info.metadata:
            kind = type(constraint).__name__
            if kind in _BOUNDS:
                key, attribute = _BOUNDS[kind]
                prop[key] = getattr(constraint, attribute)
            elif kind not in _UNSEEN_CONSTRAINTS:
                return _schema_from_pydantic(model)
        if info.description is not None:
            prop["description"] = info.description
        prop.update(extra or {})
        properties[name] = {key: prop[key] for key in _SCHEMA_KEYS if key in prop}
        if info.is_required():
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _schema_from_pydantic(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema()
    properties: dict[str, Any] = {}
    for name, prop in raw.get("properties", {}).items():
        if "anyOf" in prop:  # X | None: the model sees X (omitting it is how to say None)
            typed = [p for p in prop["anyOf"] if p.get("type") != "null"]
            prop = {**typed[0], **{k: v for k, v in prop.items() if k != "anyOf"}}
        properties[name] = {key: prop[key] for key in _SCHEMA_KEYS if key in prop}
        extra = model.model_fields[name].json_schema_extra
        if isinstance(extra, dict):
            properties[name].update({k: v for k, v in extra.items() if k in _SCHEMA_KEYS})
            properties[name] = {key: properties[name][key] for key in _SCHEMA_KEYS if key in properties[name]}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if raw.get("required"):
        schema["required"] = list(raw["required"])
    return schema


_TYPE_WORDS = {"string": "a string", "integer": "an integer", "boolean": "true or false", "number": "a number"}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_validation_error(tool_name: str, model: type[BaseModel], err: ValidationError) -> str:
    """One line naming each bad argument and what was wrong, then what to do."""
    problems: list[str] = []
    for error in err.errors(include_url=False):
        name = ".".join(str(part) for part in error["loc"]) or "arguments"
        kind = error["type"]
        value = error.get("input")
        ctx = error.get("ctx") or {}
        expected = model.model_json_schema().get("properties", {}).get(name, {}).get("type")
        if kind == "missing":
            problems.append(f"{name} is required")
        elif kind in ("greater_than_equal", "greater_than"):
            bound = ctx.get("ge", ctx.get("gt"))
            word = "at least" if kind == "greater_than_equal" else "more than"
            problems.append(f"{name} must be {word} {bound}, got {_shown(value)}")
        elif kind in ("less_than_equal", "less_than"):
            bound = ctx.get("le", ctx.get("lt"))
            word = "at most" if kind == "less_than_equal" else "less than"
            problems.append(f"{name} must be {word} {bound}, got {_shown(value)}")
        elif kind == "value_error":
            problems.append(f"{name} {str(ctx.get('error', error['msg']))}")
        elif expected in _TYPE_WORDS:
            got = "null" if value is None else f"{type(value).__name__} {_shown(value)}"
            problems.append(f"{name} must be {_TYPE_WORDS[expected]}, got {got}")
        else:
            problems.append(f"{name}: {error['msg']}")
    return f"Bad arguments for {tool_name}: {'; '.join(problems)}. Call {tool_name} again with them corrected."


A = TypeVar("A", bound=ToolArgs)


class ArgsTool(Generic[A]):
    """A tool whose arguments are the pydantic model ``Args``.

    Subclasses set ``name``, ``description``, ``Args`` and ``mutating`` and
    implement ``call``; ``spec`` and ``run`` (validation, the error text) come
    from here.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[ToolArgs]]
    mutating: bool = False
    spec: ToolSpec

    def __init__(self) -> None:
        self.spec = ToolSpec(name=self.name, description=self.description, input_schema=args_schema(self.Args))

    def parse(self, args: dict[str, Any]) -> A:
        try:
            return self.Args.model_validate(args)  # type: ignore[return-value]
        except ValidationError as err:
            raise ToolInputError(describe_validation_error(self.name, self.Args, err)) from None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return await self.call(self.parse(args), ctx)

    async def call(self, args: A, ctx: ToolContext) -> ToolOutput:
        raise NotImplementedError
