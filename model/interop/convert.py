"""Convert pickled PyTorch weights into a safe checkpoint folder: ``python -m model.interop.convert --help``.

Loading a pickle can run code hidden in the file, so the app and ``load_checkpoint`` never
do it. This one-off tool reads the file with ``torch.load(weights_only=True)`` (plain
tensors and containers only) and writes config.json + model.safetensors + tokenizer +
card.json. It accepts a state dict of our ``Transformer`` or of a model laid out like
PyTorch's translation tutorial (``Seq2SeqTransformer``: keys ``transformer.*``,
``src_tok_emb.embedding.weight``, ...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from model.checkpoint import CheckpointError, read_json, save_checkpoint
from model.config import TransformerConfig
from model.interop.torch_transformer import Seq2SeqTransformer, import_torch
from model.tokenizer import Tokenizer
from model.transformer import Transformer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.interop.convert",
        description="Turn a pickled .pt/.bin state dict into a checkpoint folder that loads without unpickling.",
    )
    parser.add_argument("--weights", required=True, help="the .pt/.pth/.bin file holding a state dict")
    parser.add_argument("--config", required=True, help="config.json with TransformerConfig fields for the model")
    parser.add_argument(
        "--tokenizer-dir",
        required=True,
        help="folder with tokenizer.model (joint) or source.model and target.model (SentencePiece)",
    )
    parser.add_argument("--out", required=True, help="checkpoint folder to write (must not exist yet)")
    parser.add_argument("--half", action="store_true", help="store fp16 weights (half the size)")
    parser.add_argument("--name", help="model description for card.json")
    return parser


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Read tensors only; a file that needs arbitrary unpickling is refused by torch itself."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises UnpicklingError or RuntimeError for unsafe or broken files
        raise CheckpointError(f"{path}: cannot be read as plain tensors ({error})") from error
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a state dict (names -> tensors)")
    return state


def convert(
    weights: Path, config_path: Path, tokenizer_dir: Path, out: Path, half: bool = False, name: str = ""
) -> Path:
    if out.exists():
        raise CheckpointError(f"{out}: already exists; choose a new folder")
    try:
        config = TransformerConfig.from_dict(read_json(config_path))
    except CheckpointError:
        raise
    except ValueError as error:
        raise CheckpointError(f"{config_path}: {error}") from error
    state = load_state_dict(weights)
    try:
        if any(key.startswith("transformer.") for key in state):
            # The tutorial's positional buffer may cover more positions than config.max_len: ours is recomputed.
            state.pop("positional_encoding.pos_embedding", None)
            tutorial = Seq2SeqTransformer(config)
            missing, unexpected = tutorial.load_state_dict(state, strict=False)
            if [k for k in missing if k != "positional_encoding.pos_embedding"] or unexpected:
                raise RuntimeError(f"missing keys {missing}, unexpected keys {unexpected}")
            model = import_torch(tutorial, config.pad_id, config.bos_id, config.eos_id, config.unk_id)
        else:
            model = Transformer(config)
            model.load_state_dict(state)
    except RuntimeError as error:
        raise CheckpointError(f"{weights}: weights do not match {config_path} ({error})") from error
    tokenizer = Tokenizer.load(tokenizer_dir)
    card = {"converted_from": weights.name, "description": name or f"converted from {weights.name}"}
    return save_checkpoint(out, model.eval(), tokenizer, card, half=half)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        folder = convert(
            Path(args.weights), Path(args.config), Path(args.tokenizer_dir), Path(args.out), args.half, args.name
        )
    except (CheckpointError, ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
