"""Failed requests by cause, against a misbehaving OpenAI-compatible endpoint (in process): HTTP
500s, streams that stall past the client's timeout, and malformed server-sent events, sent by
the load client as a level sends them; and a non-streamed reply the openai client cannot read
ends the stage with one line naming the endpoint."""

import asyncio
import json

import pandas
import pytest
from inprocess import InProcessServer
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from infbench.core.metrics import failures_by_cause, failures_text
from infbench.engines.vllm_server import ServerError
from infbench.report.serve import failed_cell
from infbench.serving.client import LoadRequest, run_level
from infbench.serving.request_table import COLUMNS, table_rows, write_table
from infbench.serving.sweep import study_request
from infbench.serving.window import streamed_record

STALL_S = 3.0  # a stalled stream's pause, past the client's 1 s timeout


class MisbehavingEndpoint(InProcessServer):
    """Request i (in arrival order): i % 5 == 0 answers HTTP 500, 1 stalls, 2 streams malformed
    events, 3 streams a good answer, 4 streams vLLM's error event. Non-streamed requests get
    JSON without choices."""

    def __init__(self):
        self.arrived = 0

    def routes(self) -> list:
        return [Route("/v1/completions", self.completions, methods=["POST"])]

    async def completions(self, request):
        body = await request.json()
        if not body.get("stream"):
            return JSONResponse({"object": "text_completion", "result": "no choices here"})
        kind, self.arrived = self.arrived % 5, self.arrived + 1
        if kind == 0:
            return JSONResponse({"error": {"message": "engine exploded"}}, status_code=500)

        async def stream():
            chunk = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                     "choices": [{"index": 0, "text": " a", "finish_reason": None}]}  # fmt: skip
            if kind == 1:
                await asyncio.sleep(STALL_S)
            if kind == 2:
                yield 'data: {"choices": [{"text": \n\n'
                return
            if kind == 4:
                yield f"data: {json.dumps({'error': {'message': 'engine dead', 'code': 500}})}\n\n"
                return
            yield f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


def test_failed_requests_are_counted_by_cause_and_the_page_names_them(tmp_path):
    requests = [LoadRequest(f"r{i}#0", "hello", 1, 1) for i in range(10)]
    with MisbehavingEndpoint() as endpoint:
        run = asyncio.run(
            run_level(endpoint.base_url, "m", requests, concurrency=10, arrivals=None, seed=0, interval_s=0.5,
                      timeout_s=1.0, scrape_metrics=False)
        )  # fmt: skip
    results = [s.result for s in run.results]
    causes = {"HTTP 500": 2, "timeout": 2, "malformed stream": 2, "error in the stream": 2}
    assert failures_by_cause(results) == causes
    assert failures_text(results) == (
        "8 of 10 requests failed: 2 HTTP 500, 2 error in the stream, 2 malformed stream, 2 timeout"
    )
    assert failed_cell({"failed": 8, "failed_by_cause": failures_by_cause(results)}) == (
        "8 (2 HTTP 500, 2 error in the stream, 2 malformed stream, 2 timeout)"
    )
    assert sum(r.success for r in results) == 2
    # The request table written and read back as a user would: each failure by its cause, no
    # token times for a failed request.
    records = [streamed_record(s, run.started) for s in run.results]
    path = tmp_path / "load.requests.csv"
    where = {"run": 1, "measurement": "c=10", "request_rate": None, "max_concurrency": 10, "pass": 1,
             "pass_started_unix": 0.0}  # fmt: skip
    written = write_table(path, table_rows([(r, True) for r in records], where, {"ttft": 10_000}))
    table = pandas.read_csv(path)
    assert written == {"file": "load.requests.csv", "rows": 10, "columns": list(COLUMNS)}
    assert list(table.columns) == list(COLUMNS) and table["success"].dtype == bool
    assert table["failure_cause"].value_counts().to_dict() == causes
    failed, done = table[~table["success"]], table[table["success"]]
    assert failed["first_token_s"].isna().all() and failed["last_token_s"].isna().all()
    assert failed["error"].str.contains("Error code: 500").sum() == 2
    ttft = [s.result.ttft for s in run.results if s.result.success]
    assert (done["first_token_s"] - done["sent_s"]).tolist() == pytest.approx(ttft, abs=2e-6)  # to the µs
    assert (done["sent_s"] >= 0).all() and (done["last_token_s"] >= done["first_token_s"]).all()
    assert table["met_slo"].tolist() == table["success"].tolist() and (table["max_tokens"] == 1).all()


def test_a_table_row_is_its_request_record_on_the_pass_clock():
    """A hand-made record, sent 1.0 s into its pass with TTFT 0.1 s and E2E 0.5 s: its first token
    at 1.1, its last at 1.5; tokens in, asked for and out kept apart; the SLO judged by the
    metrics' rule; a pass's rows in send order, a cancelled request a failure with no tokens."""
    from infbench.serving.client import LoadRequest
    from infbench.serving.window import cancelled_record

    record = {"request_id": "a#1", "prompt_tokens": 7, "max_tokens": 5, "output_tokens": 4, "ttft": 0.1,
              "e2el": 0.5, "success": True, "error": None, "sent_s": 1.0, "scheduled_s": 0.98}  # fmt: skip
    cut_off = cancelled_record(LoadRequest("b#2", "hi", 3, 9), sent_at=102.0, scheduled_s=None, started=100.0)
    where = {"run": 2, "measurement": "rate=2/s", "request_rate": 2.0, "max_concurrency": None, "pass": 3,
             "pass_started_unix": 1.7e9}  # fmt: skip
    early, late = table_rows([(cut_off, False), (record, True)], where, {"ttft": 200, "tpot": 150, "e2el": 600})
    assert early == {
        **where, "counted": True, "request_id": "a#1", "scheduled_s": 0.98, "sent_s": 1.0, "first_token_s": 1.1,
        "last_token_s": 1.5, "prompt_tokens": 7, "max_tokens": 5, "output_tokens": 4, "success": True,
        "met_slo": True, "failure_cause": None, "error": None,
        "user": None, "conversation": None, "turn": None, "think_s": None,  # a request, not a session's turn
    }  # fmt: skip
    assert list(early) == list(COLUMNS)
    # TPOT (0.5 - 0.1) / 3 = 133 ms: over a 100 ms SLO, within 150.
    assert table_rows([(record, True)], where, {"tpot": 100})[0]["met_slo"] is False
    assert table_rows([(record, True)], where, {"tpot": 150})[0]["met_slo"] is True
    assert table_rows([(record, True)], where, {})[0]["met_slo"] is None  # no SLO set
    assert (late["sent_s"], late["counted"], late["success"], late["met_slo"]) == (2.0, False, False, False)
    assert late["failure_cause"] == "cancelled" and late["first_token_s"] is None and late["max_tokens"] == 9
    assert late["prompt_tokens"] == 3 and late["output_tokens"] == 0


def test_a_non_streamed_reply_without_choices_ends_the_stage_naming_the_endpoint():
    with MisbehavingEndpoint() as endpoint:
        with pytest.raises(ServerError, match=r"/v1/completions answered the study's request without a choice"):
            study_request(base_url=endpoint.base_url, model="m", prompt="hi", warm_requests=0, seed=0, timeout_s=5)
