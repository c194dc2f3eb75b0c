"""Issue 28 (wire fidelity, second round): the provider and the agent against the loopback server,
with streams shaped like the real services'. The same items through the real process are in
tests/test_headless_wire.py."""

from __future__ import annotations

import json

import pytest
from agent_helpers import make_agent
from fake_llm_server import (
    CACHE_CONTROL_REFUSAL,
    anthropic_error_body,
    anthropic_text,
    http_error,
    refusing_cache_control,
    run_stream,
)
from fake_responses_server import responses_error, responses_failed, responses_refusal, responses_text
from provider_helpers import provider_fixture, request
from test_widgets_context import Host

from app.kernel.describe import describe
from app.kernel.events import ReportEvent
from app.kernel.messages import Message, TextBlock, ToolUseBlock
from app.providers.base import APIError, PromptCacheOff
from app.providers.openai import to_openai_messages
from app.providers.responses import to_responses_input
from snapshot_apps.fake_agent import context
from widgets.context_breakdown import ContextBreakdown
from widgets.context_panel import ContextPanel

provider = provider_fixture("responses")

QUOTA = "You exceeded your current quota, please check your plan and billing details."


# ---- errors inside a Responses stream ----

@pytest.mark.parametrize("reply, retryable", [
    (responses_error("insufficient_quota", QUOTA), False),
    (responses_error("insufficient_quota", QUOTA, nested=False), False),  # the API reference's flat shape
    (responses_failed("insufficient_quota", QUOTA), False),
    (responses_error("invalid_api_key", "Incorrect API key provided: sk-te***", error_type="invalid_request_error"),
     False),
    (responses_error("rate_limit_exceeded", "Rate limit reached for gpt-5 on tokens per min (TPM).",
                     error_type="tokens"), True),
    (responses_error("too_many_requests", "Too Many Requests"), True),
    (responses_failed("server_error", "The server had an error processing your request."), True),
    (responses_failed("invalid_prompt", "Invalid prompt: your prompt was flagged."), False),
], ids=["quota", "quota_flat", "quota_failed", "bad_key", "rate_limit_tpm", "too_many_requests", "failed_server_error", "failed_invalid_prompt"])
async def test_a_nested_stream_error_keeps_the_services_words_and_retries_only_what_can_pass(
        fake_llm, provider, reply, retryable: bool) -> None:
    fake_llm.enqueue(reply)
    result = await run_stream(provider, request())
    assert isinstance(result.error, APIError), result.error
    assert result.error.message != "the response failed"
    assert result.error.retryable is retryable, str(result.error)
    said = reply.events[-1].decode()
    assert result.error.message.split(":")[0] in said, (result.error.message, said)


async def test_an_error_event_with_no_words_names_its_code(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_error("insufficient_quota", ""))
    result = await run_stream(provider, request())
    assert isinstance(result.error, APIError) and not result.error.retryable
    assert "insufficient_quota" in str(result.error)


# ---- refusals ----

async def test_a_responses_refusal_streams_and_finishes_as_a_refusal(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_refusal(["I'm sorry,", " I can't", " help with that."]))
    result = await run_stream(provider, request())
    assert result.text == "I'm sorry, I can't help with that."  # as it came, delta by delta
    assert result.completed.message.text == "I'm sorry, I can't help with that."
    assert result.completed.stop_reason == "refusal"


# ---- reasoning: the summary parts apart, the tokens counted ----

async def test_reasoning_summary_parts_are_kept_apart_by_a_blank_line(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_text("A map.", reasoning=(["Looking at ", "the street."],
                                                         ["**Explaining the map**", " Now the legend."])))
    result = await run_stream(provider, request())
    assert result.thinking == "Looking at the street.\n\n**Explaining the map** Now the legend."


@pytest.mark.parametrize("protocol, reply", [
    ("responses", responses_text("Done.", usage=dict(input=300, output=120, reasoning=96))),
    ("anthropic", anthropic_text("Done.", thinking="Hmm.", usage=dict(input=300, output=120, thinking=96))),
])
async def test_reasoning_tokens_reach_the_usage_event_the_ledger_and_its_words(
        fake_llm, tmp_path, monkeypatch, protocol: str, reply) -> None:
    fake_llm.enqueue(reply)
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=protocol)
    try:
        await agent.run_turn("think")
    finally:
        await agent.aclose()
    usage = events.of("usage")[-1]
    assert usage.reasoning_tokens == 96 and usage.output_tokens == 120
    assert usage.model_dump(mode="json")["reasoning_tokens"] == 96  # the stream-json line and the transcript
    figures = agent.engine.context_event()
    assert figures.cumulative_reasoning == 96
    line = describe(ReportEvent(kind="usage", messages=2, context=figures))
    assert line is not None and "output 120 (reasoning 96)" in line.text, line


def test_a_usage_line_without_reasoning_keeps_its_old_keys() -> None:
    from app.kernel.events import UsageEvent

    line = UsageEvent(input_tokens=1, cache_read_tokens=0, cache_write_tokens=0, output_tokens=2,
                      context_tokens=3).model_dump(mode="json")
    assert "reasoning_tokens" not in line


async def test_the_breakdown_shows_the_reasoning_share_of_the_output() -> None:
    app = Host()
    async with app.run_test(size=(160, 24)) as pilot:
        figures = context(50_000).model_copy(update={"cumulative_output": 2_500, "cumulative_reasoning": 1_800})
        app.query_one(ContextPanel).update_context(figures)
        await pilot.pause()
        text = app.query_one(ContextBreakdown).render().plain
        assert "out 2.5K (reasoning 1.8K)" in text, text


# ---- phase and argument bytes in the wire formats ----

def test_phase_goes_back_on_the_assistant_message_and_only_where_it_was() -> None:
    history = [Message.user("hi"),
               Message(role="assistant", content=[TextBlock(text="Looking.", phase="commentary")]),
               Message.user("go on"),
               Message(role="assistant", content=[TextBlock(text="Old model.")])]
    said = [i for i in to_responses_input(history) if i.get("role") == "assistant"]
    assert said == [{"type": "message", "role": "assistant", "content": "Looking.", "phase": "commentary"},
                    {"type": "message", "role": "assistant", "content": "Old model."}]
    # kept through the transcript's JSON (resume) and absent from it where there was none
    again = Message.model_validate_json(history[1].model_dump_json())
    assert again.content[0] == TextBlock(text="Looking.", phase="commentary")
    assert "phase" not in history[3].model_dump_json()


def test_arguments_changed_since_the_model_wrote_them_are_written_from_the_input() -> None:
    use = ToolUseBlock(id="c1", name="read_file", input={"path": "b.txt"}, raw_arguments='{"path":"a.txt"}')
    history = [Message.user("hi"), Message(role="assistant", content=[use])]
    chat = to_openai_messages("", history)[-1]["tool_calls"][0]["function"]["arguments"]
    responses = [i for i in to_responses_input(history) if i["type"] == "function_call"][0]["arguments"]
    assert chat == responses == '{"path": "b.txt"}'


# ---- prompt caching behind a gateway ----

anthropic_provider = provider_fixture("anthropic")


def _has_marks(body: dict) -> bool:
    return "cache_control" in json.dumps(body) or isinstance(body.get("system"), list)


async def test_a_cache_refusal_is_retried_once_without_marks_and_remembered(fake_llm, anthropic_provider) -> None:
    fake_llm.default = refusing_cache_control(anthropic_text("one"), anthropic_text("two"))
    first = await run_stream(anthropic_provider, request())
    second = await run_stream(anthropic_provider, request())
    assert first.completed.message.text == "one" and second.completed.message.text == "two"
    notes = [e for e in first.events if isinstance(e, PromptCacheOff)]
    assert [n.reason for n in notes] == [f"HTTP 400: {CACHE_CONTROL_REFUSAL}"]
    assert not any(isinstance(e, PromptCacheOff) for e in second.events)  # said once per session
    assert [_has_marks(r.json) for r in fake_llm.requests] == [True, False, False]


@pytest.mark.parametrize(("message", "requests"), [
    ("prompt is too long: 200251 tokens > 200000 maximum", 1),  # too long: never the marks
    # a gateway's first cached request that fails is tried once without them; failing again, it
    # is the server's first answer, and caching stays on
    ("max_tokens: 64000 > 32000, which is the maximum allowed", 2)])
async def test_a_400_about_something_else_keeps_its_words_and_caching_stays_on(
        fake_llm, anthropic_provider, message: str, requests: int) -> None:
    fake_llm.default = lambda body, path: http_error(400, anthropic_error_body("invalid_request_error", message))
    result = await run_stream(anthropic_provider, request())
    assert isinstance(result.error, APIError) and message in result.error.message
    assert len(fake_llm.requests) == requests and anthropic_provider.prompt_caching
    assert not any(isinstance(e, PromptCacheOff) for e in result.events)


async def test_a_refusal_when_no_marks_were_sent_is_the_error_itself(fake_llm, anthropic_provider) -> None:
    anthropic_provider.prompt_caching = False
    fake_llm.enqueue(http_error(400, anthropic_error_body("invalid_request_error", CACHE_CONTROL_REFUSAL)))
    result = await run_stream(anthropic_provider, request())
    assert isinstance(result.error, APIError) and len(fake_llm.requests) == 1


async def test_the_fallback_event_has_words_and_the_ledger_keeps_the_cached_share(
        fake_llm, tmp_path, monkeypatch) -> None:
    fake_llm.default = refusing_cache_control(anthropic_text("hi", usage=dict(input=200, cache_read=600, output=5)))
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider="anthropic")
    try:
        await agent.run_turn("hello")
    finally:
        await agent.aclose()
    [off] = events.of("prompt_cache_off")
    line = describe(off)
    assert line is not None and line.kind == "warning" and CACHE_CONTROL_REFUSAL in line.text
    report = describe(ReportEvent(kind="usage", messages=2, context=agent.engine.context_event()))
    assert report is not None and "cached 600, 75% of input" in report.text, report


# ---- the official SDK reads the same bytes the same way (the oracle for the shapes above) ----

async def _sdk_events(fake_llm, reply) -> list:
    import openai  # here, not at the top: every xdist worker collects this file, few run it

    client = openai.AsyncOpenAI(api_key="sk-test-fake-key-0123456789", base_url=fake_llm.base_url("responses"),
                                max_retries=0)
    try:
        stream = await client.responses.create(model="fake-model", input="hi", stream=True)
        return [event async for event in stream]
    finally:
        await client.close()


async def _ours(fake_llm, provider, reply):
    fake_llm.enqueue(reply)
    return await run_stream(provider, request())


@pytest.mark.xdist_group("official-sdks")  # the worker that imports the SDKs (test_providers_replay.py)
async def test_the_sdk_sees_the_nested_error_with_the_words_we_show(fake_llm, provider) -> None:
    import openai

    reply = responses_error("insufficient_quota", QUOTA)
    fake_llm.enqueue(reply)
    with pytest.raises(openai.APIError) as raised:
        await _sdk_events(fake_llm, reply)
    assert raised.value.body["code"] == "insufficient_quota"  # type: ignore[index]
    ours = await _ours(fake_llm, provider, reply)
    assert ours.error.message == raised.value.message == QUOTA


@pytest.mark.xdist_group("official-sdks")
async def test_the_sdk_sees_the_refusal_phase_and_summary_parts_we_keep(fake_llm, provider) -> None:
    refusal = responses_refusal(["I'm sorry,", " I can't."])
    fake_llm.enqueue(refusal)
    final = (await _sdk_events(fake_llm, refusal))[-1].response
    [part] = final.output[0].content
    ours = await _ours(fake_llm, provider, refusal)
    assert part.type == "refusal" and part.refusal == ours.completed.message.text == ours.text
    assert ours.completed.stop_reason == "refusal"

    phased = responses_text("Looking first.", phase="commentary",
                            reasoning=("Looking at the street.", "**Explaining the map**"))
    fake_llm.enqueue(phased)
    final = (await _sdk_events(fake_llm, phased))[-1].response
    ours = await _ours(fake_llm, provider, phased)
    message = next(o for o in final.output if o.type == "message")
    assert message.phase == "commentary" == ours.completed.message.content[-1].phase
    summary = next(o for o in final.output if o.type == "reasoning").summary
    assert [s.text for s in summary] == ["Looking at the street.", "**Explaining the map**"]
    assert ours.thinking == "\n\n".join(s.text for s in summary)


async def test_phase_survives_a_server_compaction_and_goes_back_after_it(fake_llm, tmp_path, monkeypatch) -> None:
    from test_server_context import server_settings

    from app.agent.server_context import configure_server_context

    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, memory_update_tokens=0, provider="responses")
    configure_server_context(agent.provider, agent.engine, server_settings(server_compaction=True))
    fake_llm.enqueue(responses_text("Done reading.", compaction="gAAAAAB-compacted-fake", phase="final_answer"),
                     responses_text("Next.", phase="final_answer"))
    try:
        await agent.run_turn("read")
        await agent.run_turn("and then?")
    finally:
        await agent.aclose()
    sent = fake_llm.requests[-1].json["input"]
    assert sent[0]["type"] == "compaction"
    assert [(i["content"], i.get("phase")) for i in sent if i.get("role") == "assistant"] == [
        ("Done reading.", "final_answer")]


# ---- as an attacker would: a hostile server ----

async def test_a_server_that_always_refuses_the_marks_gets_one_retry_not_a_loop(fake_llm, anthropic_provider) -> None:
    fake_llm.default = refusing_cache_control()  # refuses marked requests; any other gets a 500 (no reply left)
    fake_llm.allow_unscripted = True
    first = await run_stream(anthropic_provider, request())
    assert isinstance(first.error, APIError) and len(fake_llm.requests) == 2  # the call and one retry without
    fake_llm.default = lambda body, path: http_error(400, anthropic_error_body("invalid_request_error",
                                                                               CACHE_CONTROL_REFUSAL))
    second = await run_stream(anthropic_provider, request())
    assert isinstance(second.error, APIError) and len(fake_llm.requests) == 3  # off for good: no second retry


@pytest.mark.parametrize("phase", ["x" * 5_000, "commentary\n\x1b]52;c;aGk=\x07", "Final Answer"])
async def test_a_phase_that_is_not_a_word_is_not_carried(fake_llm, provider, phase: str) -> None:
    fake_llm.enqueue(responses_text("Hi.", phase=phase))
    result = await run_stream(provider, request())
    assert result.completed.message.content[-1] == TextBlock(text="Hi.")
