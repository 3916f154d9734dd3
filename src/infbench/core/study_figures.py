"""The published figures of the study this pipeline reproduces ("learn-vLLM-inference"),
labelled with the hardware and method that produced them, for side-by-side display."""

HARDWARE = (
    "Ryzen 7 7840HS laptop, no GPU, vLLM 0.21 CPU Docker image, torch 2.11 CPU, bf16, 7 OpenMP threads, 1 GiB KV cache"
)
MODEL = "HuggingFaceTB/SmolLM-135M"

OFFLINE = {
    "hardware": HARDWARE,
    "model": MODEL,
    "method": "one sampled run per engine (temperature 0.7, no seed), no warm-up, time.time()",
    "figures": [
        {"scenario": "study_single_100", "engine": "hf", "output_tok_s": 49.62, "seconds": 2.0155, "tokens": 100},
        {"scenario": "study_single_50", "engine": "hf", "output_tok_s": 49.8, "seconds": 1.00, "tokens": 50},
        {"scenario": "study_single_50", "engine": "vllm", "output_tok_s": 61.3, "seconds": 0.82, "tokens": 50},
    ],
    "vllm_over_hf": {"study_single_50": 61.3 / 49.8},
    "kv_cache_tokens": 46_592,
    "max_concurrency_128_tokens": 364,
}

# Parts 3 and 4: five requests, each reserved 512 slots; pages of 16; a pool of 10,000 slots.
KV_REQUEST_TOKENS = (45, 128, 23, 256, 67)
KV_RESERVED_PER_REQUEST = 512
KV_PAGE = 16
KV_POOL_SLOTS = 10_000
KV_REPORTED = {
    "contiguous_slots": 2560,
    "paged_slots": 544,
    "used_slots": 519,
    "contiguous_utilisation": 0.203,
    "paged_utilisation": 0.954,
    "contiguous_users": 19,
    "paged_users": 92,
    "ideal_users": 97,
}

SERVER = {
    "hardware": HARDWARE,
    "prompt": "What is inference in machine learning?",
    "latency_s": 1.29,
    "prompt_tokens": 7,
    "completion_tokens": 50,
    "method": "one cold, non-streamed request",
}
