"""The offline stages: Transformers generate() and vllm.LLM on the same scenarios, their clock, and their comparison."""
