"""Do HF and vLLM run the same weights? Teacher forcing: HF scores vLLM's greedy continuation
and counts the tokens HF would also pick, or that are within a near-tie of its pick.

What it separates, shown by tests: another model's weights (flagged) from the same weights
under other kernels (passes). It does not separate dtypes: float32 and bfloat16 runs of one
model agree within near-ties, so each engine's dtype is checked from what the engine reports
instead (offline_comparison.like_for_like_checks)."""

from __future__ import annotations


def token_agreement(reference: list[int], candidate: list[int]) -> dict:
    """Position-wise share of equal tokens, and how many leading tokens agree exactly."""
    length = max(len(reference), len(candidate)) or 1
    same = sum(a == b for a, b in zip(reference, candidate))
    prefix = next(
        (i for i, (a, b) in enumerate(zip(reference, candidate)) if a != b), min(len(reference), len(candidate))
    )
    return {"agreement": same / length, "matching_prefix": prefix, "tokens": length}


# Greedy decoding flips between near-tied tokens under different kernels' rounding (seen
# here: a 0.03-logit gap between the top two tokens), after which free-running outputs
# diverge. Teacher forcing asks the right question instead: would HF, given vLLM's own
# context, have picked vLLM's token, or one within this many logits of it?
NEAR_TIE_LOGITS = 0.5


def teacher_forced_gaps(
    model, prompt_ids: list[int], continuation: list[int], suppressed: set[int] = frozenset()
) -> list[float]:
    """For each token of `continuation`: HF's best logit minus the logit HF gives that token,
    with the prompt and the preceding continuation tokens as context (0 = HF's own pick).
    `suppressed` tokens cannot be HF's pick: vLLM generated with them masked (ignore_eos and
    min_tokens mask EOS and stop tokens), so HF must choose among the same tokens."""
    import torch

    ids = torch.tensor([prompt_ids + continuation], device=model.device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
        if suppressed:
            logits[:, sorted(suppressed)] = float("-inf")
    chosen = logits.gather(1, torch.tensor(continuation, device=model.device).unsqueeze(1)).squeeze(1)
    return (logits.max(dim=1).values - chosen).tolist()


def same_model_verdict(hf_outputs: dict, vllm_outputs: dict, gaps: dict[str, list[float]], threshold: float) -> dict:
    """Free-running agreement (information) and teacher-forced consistency (the check)."""
    ids = sorted(set(hf_outputs) & set(vllm_outputs) & set(gaps))
    if not ids:
        return {
            "requests": {},
            "mean_agreement": None,
            "consistency": None,
            "flagged": True,
            "note": "no request was run greedily by both engines",
        }
    per_request = {}
    for rid in ids:
        record = token_agreement(hf_outputs[rid], vllm_outputs[rid])
        record["consistent_share"] = sum(gap <= NEAR_TIE_LOGITS for gap in gaps[rid]) / len(gaps[rid])
        record["max_logit_gap"] = max(gaps[rid])
        per_request[rid] = record
    all_gaps = [gap for rid in ids for gap in gaps[rid]]
    consistency = sum(gap <= NEAR_TIE_LOGITS for gap in all_gaps) / len(all_gaps)
    flagged = consistency < threshold
    return {
        "requests": per_request,
        "mean_agreement": sum(r["agreement"] for r in per_request.values()) / len(per_request),
        "exact_matches": sum(r["agreement"] == 1.0 for r in per_request.values()),
        "consistency": consistency,
        "near_tie_logits": NEAR_TIE_LOGITS,
        "threshold": threshold,
        "flagged": flagged,
        "note": (
            f"only {consistency:.0%} of vLLM's greedy tokens are HF's choice or within {NEAR_TIE_LOGITS} "
            "logits of it: the engines are probably not running the same weights"
            if flagged
            else f"{consistency:.0%} of vLLM's greedy tokens are HF's choice or a near-tie (within "
            f"{NEAR_TIE_LOGITS} logits); free-running outputs diverge after such ties"
        ),
    }


def gaps_under_hf(model_dir: str, dtype: str, device: str, workload: list[dict], vllm_outputs: dict) -> dict:
    """Teacher-forced gaps of vLLM's greedy outputs under the HF model in the same dtype, with
    the stop tokens vLLM suppressed masked."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from infbench.offline.hf_baseline import TORCH_DTYPES, stop_token_ids
    from infbench.workload.requests import prompt_token_ids

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=TORCH_DTYPES[dtype]).to(device).eval()
    suppressed = stop_token_ids(model, tokenizer)
    prompts = {r["id"]: prompt_token_ids(tokenizer, r) for r in workload}
    return {
        rid: teacher_forced_gaps(model, prompts[rid], tokens, suppressed)
        for rid, tokens in vllm_outputs.items()
        if rid in prompts and tokens
    }
