"""Workload generation: seeded, sized by the model's tokenizer, within the engine's limits."""

import random
import statistics

import pytest
from transformers import AutoTokenizer

from infbench.workload.requests import PRESETS, STUDY_API_PROMPT, build_workload, count_tokens, lognormal_lengths


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def workload(preset="alpaca", n=50, study=True):
    return {"study_prompts": study, "synthetic": {"num_requests": n, "preset": preset}}


def test_lognormal_mean_matches_the_preset():
    lengths = lognormal_lengths(random.Random(0), 20_000, mean=161, sigma=0.9, low=1, high=10**9)
    assert statistics.mean(lengths) == pytest.approx(161, rel=0.03)


def test_same_seed_same_workload_other_seed_differs(tokenizer):
    first = build_workload(tokenizer, workload(), 512, 100, seed=0)[0]
    again = build_workload(tokenizer, workload(), 512, 100, seed=0)[0]
    other = build_workload(tokenizer, workload(), 512, 100, seed=1)[0]
    assert [r.to_json() for r in first] == [r.to_json() for r in again]
    assert [r.prompt for r in first] != [r.prompt for r in other]


def test_counts_come_from_the_tokenizer_and_fit_the_engine(tokenizer):
    requests = build_workload(tokenizer, workload("sharegpt", 40), 256, 100, seed=3)[0]
    assert len(requests) == 42
    for request in requests:
        assert request.prompt_tokens == count_tokens(tokenizer, request.prompt)
        assert request.prompt_tokens + request.max_tokens <= 256
    assert requests[1].prompt == STUDY_API_PROMPT and requests[1].max_tokens == 50


def test_presets_differ_as_the_paper_says(tokenizer):
    alpaca = build_workload(tokenizer, workload("alpaca", 300, study=False), 4096, 100, seed=0)[0]
    sharegpt = build_workload(tokenizer, workload("sharegpt", 300, study=False), 4096, 100, seed=0)[0]

    def mean_in(rs):
        return statistics.mean(r.prompt_tokens for r in rs)

    def mean_out(rs):
        return statistics.mean(r.max_tokens for r in rs)

    assert mean_in(alpaca) == pytest.approx(PRESETS["alpaca"]["prompt_tokens"]["mean"], rel=0.25)
    assert mean_out(sharegpt) == pytest.approx(PRESETS["sharegpt"]["output_tokens"]["mean"], rel=0.15)
    assert mean_in(sharegpt) > 4 * mean_in(alpaca)
