"""The client's stream reader: events split across reads, CRLF line ends, comments, multi-line
data, and the timing taken from each read's arrival (vLLM's rules: the first chunk with a
choice is the first token, the usage chunk is no token)."""

import asyncio
import json

import pytest

from infbench.serving.client import (
    LoadRequest,
    complete_event,
    event_data,
    openai_client,
    sse_events,
    stream_request,
    streamed_result,
)


def event(payload) -> bytes:
    return b"data: " + json.dumps(payload).encode()


def choice(text) -> dict:
    return {"choices": [{"index": 0, "text": text}]}


def test_an_event_split_across_reads_is_whole_once_its_end_arrives():
    whole = event(choice(" a")) + b"\n\n" + event(choice(" b")) + b"\n\n"
    cut = len(event(choice(" a"))) + 5  # inside the second event
    events, left = sse_events(b"", whole[:cut])
    assert len(events) == 1 and event_data(events[0]) == choice(" a")
    events, left = sse_events(left, whole[cut:])
    assert [event_data(e) for e in events] == [choice(" b")] and left == b""


def test_crlf_line_ends_split_between_reads_still_end_an_event():
    whole = (event(choice(" a")) + b"\r\n\r\n").decode()
    first, second = whole[:-3].encode(), whole[-3:].encode()  # "...\r" | "\n\r\n"
    events, left = sse_events(b"", first)
    assert events == []
    events, left = sse_events(left, second)
    assert [event_data(e) for e in events] == [choice(" a")] and left == b""


def test_comments_done_and_multi_line_data():
    assert event_data(b": ping") is None
    assert event_data(b"data: [DONE]") is None
    assert event_data(b'event: x\ndata: {"choices":\ndata: []}') == {"choices": []}


def test_timing_comes_from_the_reads_and_the_usage_chunk_is_no_token():
    request = LoadRequest("r#0", "hello", 4, 3)
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
    arrived = [
        (10.5, [event(choice(" a"))]),
        (10.7, [event(choice(" b")), event(choice(" c"))]),  # two tokens in one read
        (10.8, [event(usage), b"data: [DONE]"]),
    ]
    streamed = streamed_result(request, "completions", 10.0, arrived)
    result = streamed.result
    assert (round(result.ttft, 9), round(result.e2el, 9)) == (0.5, 0.7)
    assert [round(gap, 9) for gap in result.itl] == [0.2, 0.0]
    assert (result.output_tokens, result.prompt_tokens, streamed.text) == (3, 5, " a b c")


def test_a_chat_stream_counts_its_role_only_first_chunk():
    request = LoadRequest("r#0", "hello", 4, 1, messages=[{"role": "user", "content": "hello"}])
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    token = {"choices": [{"index": 0, "delta": {"content": " a"}}]}
    streamed = streamed_result(request, "chat", 0.0, [(0.25, [event(role)]), (0.5, [event(token)])])
    assert streamed.result.ttft == 0.25 and streamed.text == " a" and len(streamed.result.itl) == 1


def test_a_last_event_without_its_blank_line_counts_only_when_whole():
    assert complete_event(event(choice(" a"))) and complete_event(b"data: [DONE]")
    assert not complete_event(b'data: {"choices": [{"text"') and not complete_event(b"  ")


@pytest.mark.slow  # starts the reference server
def test_an_error_status_is_a_failed_request_that_says_why(tmp_path):
    from infbench.serving.reference_server import ReferenceServer, Schedule

    async def send(base_url, key):
        client = openai_client(base_url, 10, key)
        try:
            return (await stream_request(client, "m", LoadRequest("r#0", "hello", 1, 2))).result
        finally:
            await client.close()

    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=1, itl_ms=1), api_key="sk-right") as server:
        wrong = asyncio.run(send(server.base_url, "sk-wrong"))
        right = asyncio.run(send(server.base_url, "sk-right"))
    assert not wrong.success and "401" in wrong.error and "Unauthorized" in wrong.error
    assert right.success and right.output_tokens == 2
