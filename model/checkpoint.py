"""Checkpoints as folders: config.json, model.safetensors, tokenizer model(s), card.json, and optionally
source_words.json (the training source's word counts; model.analysis.domain.SourceWords reads it).

Loading never unpickles anything: weights come only from safetensors, metadata only from
JSON. Every problem names the file and what is wrong with it. The card is a ``model.card.Card``
(its schema lives there). An untrained model's folder may hold its seed instead of its weights (the
card's ``initial_weights``): its weights are rebuilt from the seed and checked against the digest
recorded with it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors
import torch
from safetensors.torch import load_model, save_model

from model.card import Card, InitialWeights
from model.config import TransformerConfig
from model.tokenizer import SpecialName, Tokenizer
from model.transformer import Transformer
from model.translator import Translator

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl")
CONVERT_HINT = (
    "pickled weights can run arbitrary code and are never loaded; convert them once with "
    "`python -m model.interop.convert --weights FILE --config config.json --tokenizer-dir DIR --out FOLDER` "
    "(it reads them with torch.load(weights_only=True))"
)


class CheckpointError(ValueError):
    """A checkpoint folder or file that cannot be used; the message names the file."""


def resolve_device(requested: str = "auto") -> tuple[torch.device, list[str]]:
    """Pick CUDA, then MPS, then CPU for "auto"; fall back to CPU with a notice when asked for a missing one."""
    notices: list[str] = []
    requested = requested.lower()
    cuda = torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if requested == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu"), notices
    if requested.startswith("cuda") and not cuda:
        notices.append("CUDA was requested but is not available here: running on the CPU instead.")
        return torch.device("cpu"), notices
    if requested == "mps" and not mps:
        notices.append("MPS was requested but is not available here: running on the CPU instead.")
        return torch.device("cpu"), notices
    if requested not in ("cpu", "mps") and not requested.startswith("cuda"):
        raise ValueError(f"unknown device {requested!r}: use auto, cpu, cuda or mps")
    return torch.device(requested), notices


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"{path}: file is missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


# torch.manual_seed is global: two sessions rebuilding initial weights at once must not interleave their draws
_SEEDED_INIT = threading.Lock()


def initial_model(config: TransformerConfig, seed: int) -> Transformer:
    """``Transformer(config)`` right after ``torch.manual_seed(seed)``, as a training run creates its model;
    the global random state is left as it was.

    Only the CPU generator is seeded (and restored): the model is created on the CPU, and
    torch.manual_seed would also reseed CUDA's generators, which fork_rng(devices=[]) leaves alone.
    """
    with _SEEDED_INIT, torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return Transformer(config)


def weights_digest(model: Transformer) -> str:
    """sha256 of the model's fp16 weights (names and bytes, in state_dict order): what an fp16 checkpoint holds."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode("utf-8"))
        digest.update(tensor.detach().to("cpu", torch.float16).contiguous().numpy().tobytes())
    return digest.hexdigest()


def save_checkpoint(
    folder: str | Path,
    model: Transformer,
    tokenizer: Tokenizer,
    card: Card | dict[str, Any] | None = None,
    half: bool = False,
    initial_seed: int | None = None,
) -> Path:
    """Write a checkpoint folder. ``half`` stores fp16 weights (half the size; loaded back as fp32). ``card`` (a
    Card, or a dict read as one) is written with the model's parameter count added when it has none.

    ``initial_seed``: the seed the model was created with, for a model not trained yet. When the
    model is exactly ``initial_model(config, initial_seed)`` in fp16, the card records the seed and
    the weights' digest and no weights file is written; otherwise the weights are written as usual.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")
    card = dataclasses.replace(card) if isinstance(card, Card) else Card.from_dict(card or {})  # the caller's stays
    if card.parameters is None:
        card.parameters = model.num_parameters()
    if (
        half
        and initial_seed is not None
        and (digest := weights_digest(model)) == weights_digest(initial_model(model.config, initial_seed))
    ):
        card.initial_weights = InitialWeights(seed=initial_seed, dtype="float16", sha256=digest)
        (folder / "model.safetensors").unlink(missing_ok=True)
    else:
        card.initial_weights = None  # a card passed on from a seeded folder: these weights are written out
        weights = copy.deepcopy(model).cpu()
        if half:
            weights = weights.half()
        save_model(weights, str(folder / "model.safetensors"), metadata={"dtype": "float16" if half else "float32"})
    tokenizer.save(folder)
    card.save(folder)
    return folder


def _refuse_pickles(path: Path) -> None:
    if path.is_file() and path.suffix in PICKLE_SUFFIXES:
        raise CheckpointError(f"{path}: {CONVERT_HINT}")
    if path.is_dir() and not (path / "model.safetensors").exists():
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise CheckpointError(f"{path / pickles[0]}: {CONVERT_HINT}")


def read_config(folder: Path) -> TransformerConfig:
    try:
        return TransformerConfig.from_dict(read_json(folder / "config.json"))
    except CheckpointError:
        raise
    except ValueError as error:
        raise CheckpointError(f"{folder / 'config.json'}: {error}") from error


def build_model(folder: Path) -> tuple[Transformer, Tokenizer]:
    """Validate every file of a checkpoint folder and return the model (CPU, eval) and tokenizer."""
    folder = Path(folder)
    config, tokenizer = _checked_config_and_tokenizer(folder)
    weights = folder / "model.safetensors"
    if not weights.is_file():
        return seeded_model(folder, config, _seed_recipe(folder, weights)), tokenizer
    model = Transformer(config)
    _check_stored_tensors(weights, model)
    try:
        load_model(model, str(weights), strict=True)
    except RuntimeError as error:
        raise CheckpointError(f"{weights}: weights do not match config.json ({error})") from error
    except Exception as error:  # safetensors raises its own error types for truncated or corrupt files
        raise CheckpointError(f"{weights}: corrupt or truncated safetensors file ({error})") from error
    model.float().eval().requires_grad_(False)
    return model, tokenizer


def check_checkpoint(folder: str | Path) -> None:
    """Make every check ``build_model`` makes, with its errors, without reading the weights: the names and shapes
    in model.safetensors' header are checked against the architecture config.json describes, built on the meta
    device, and safetensors checks the file's length against its header. Listing a folder of a model of hundreds of
    millions of parameters reads kilobytes. A seed kept in place of the weights is checked by rebuilding them, as
    loading does (only untrained models are kept so)."""
    folder = Path(folder)
    config, _ = _checked_config_and_tokenizer(folder)
    weights = folder / "model.safetensors"
    if not weights.is_file():
        seeded_model(folder, config, _seed_recipe(folder, weights))
        return
    _check_stored_tensors(weights, architecture(config))


def architecture(config: TransformerConfig) -> Transformer:
    """The model ``config`` describes, with no weights (the "meta" device): its tensors' names, shapes and dtypes,
    and so its size, known before anything is loaded or drawn."""
    with torch.device("meta"):
        return Transformer(config)


def _checked_config_and_tokenizer(folder: Path) -> tuple[TransformerConfig, Tokenizer]:
    """config.json and the tokenizer, checked against each other (vocabulary sizes, special ids)."""
    _refuse_pickles(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a checkpoint folder")
    config = read_config(folder)
    try:
        tokenizer = Tokenizer.load(folder)
    except (FileNotFoundError, ValueError) as error:
        raise CheckpointError(str(error)) from error
    tokenizer_file = "/".join(tokenizer.files)
    for side, size in (("source", config.src_vocab_size), ("target", config.tgt_vocab_size)):
        if tokenizer.vocab_size(side) != size:
            raise CheckpointError(
                f"{folder / tokenizer_file}: {side} vocabulary has {tokenizer.vocab_size(side)} pieces "
                f"but config.json says {size}"
            )
        special = tokenizer.special_ids(side)
        names: tuple[SpecialName, ...] = (
            ("pad_id", "bos_id", "eos_id", "unk_id") if tokenizer.marian else ("pad_id", "bos_id", "eos_id")
        )
        for name, value in ((name, special[name]) for name in names):
            # sources are padded with source_pad_id: pad_id, unless the source vocabulary has a pad of its own
            own_pad = (side, name) == ("source", "pad_id") and config.source_pad_id != config.pad_id
            field = "source_pad_id" if own_pad else name
            if getattr(config, field) != value:
                raise CheckpointError(
                    f"{folder / 'config.json'}: {field}={getattr(config, field)} but the {side} tokenizer uses {value}"
                )
    return config, tokenizer


def _seed_recipe(folder: Path, weights: Path) -> InitialWeights:
    recipe = read_card(folder).initial_weights
    if recipe is None:
        raise CheckpointError(f"{weights}: file is missing")
    return recipe


def _check_stored_tensors(weights: Path, model: Transformer) -> None:
    """The tensors model.safetensors' header names, against ``model``'s, as safetensors' strict ``load_model``
    checks them: every tensor of the model stored, under one of its names when several modules share it (tied
    embeddings are stored once), nothing else stored, every shape the model's. Reads the header alone."""
    try:
        with safetensors.safe_open(str(weights), framework="pt") as handle:
            stored = {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}
    except Exception as error:  # safetensors raises its own error types for truncated or corrupt files
        raise CheckpointError(f"{weights}: corrupt or truncated safetensors file ({error})") from error
    shapes = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    names_of: dict[int, list[str]] = {}
    every_name = itertools.chain(
        model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False)
    )
    for name, tensor in every_name:
        if name in shapes:
            names_of.setdefault(id(tensor), []).append(name)
    missing, unexpected = [], sorted(set(stored) - set(shapes))
    for names in names_of.values():
        kept = sorted(name for name in names if name in stored)
        if not kept:
            missing.append(min(names))
        unexpected += kept[1:]  # a shared tensor stored twice: its second copy would never be read
    problems = [f"Missing key(s): {', '.join(sorted(missing))}"] if missing else []
    problems += [f"Unexpected key(s): {', '.join(sorted(unexpected))}"] if unexpected else []
    problems += [
        f"size mismatch for {name}: the file has {stored[name]}, config.json makes {shapes[name]}"
        for name in sorted(set(stored) & set(shapes))
        if stored[name] != shapes[name]
    ]
    if problems:
        raise CheckpointError(f"{weights}: weights do not match config.json ({'; '.join(problems)})")


def seeded_model(folder: Path, config: TransformerConfig, recipe: InitialWeights) -> Transformer:
    """The untrained model ``recipe`` (folder's card's ``initial_weights``) describes, rebuilt from its seed
    (CPU, eval, fp16 values)."""
    where = f"{folder / 'card.json'}: initial_weights"
    model = initial_model(config, recipe.seed).half()
    if weights_digest(model) != recipe.sha256:
        raise CheckpointError(
            f"{where}: seed {recipe.seed} gives other weights than the ones recorded (sha256 differs); "
            f"this PyTorch ({torch.__version__}) initialises differently from the one that wrote the folder"
        )
    return model.float().eval().requires_grad_(False)


def read_card(folder: str | Path) -> Card:
    """card.json describes a shipped model; a folder without one still loads (with an empty card). A card that is
    not valid JSON or does not fit model.card's schema is refused, naming the file and the key."""
    try:
        return Card.load(folder)
    except ValueError as error:
        raise CheckpointError(str(error)) from error


@dataclass(frozen=True)
class CheckpointEntry:
    """One sub-folder of a checkpoints folder: usable (with its card) or skipped (with why)."""

    name: str
    path: str
    card: Card = field(default_factory=Card)
    error: str = ""  # why the folder was skipped; empty for a usable checkpoint


def scan_checkpoints(root: str | Path) -> list[CheckpointEntry]:
    """Check every sub-folder of ``root`` as loading it would (``check_checkpoint``: config, tokenizer, the weights'
    header), in name order, hidden ones left out.

    Plain data defined in a module, so the app can cache the result (pickled) while many
    sessions run its script at once.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    entries = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            check_checkpoint(path)
            entries.append(CheckpointEntry(path.name, str(path), read_card(path)))
        except CheckpointError as error:
            entries.append(CheckpointEntry(path.name, str(path), error=str(error)))
    return entries


SNAPSHOT_STAGES = ("untrained", "early")  # snapshot folder names in training order; the checkpoint itself is "final"
FINAL_STAGE = "final"


def find_snapshots(path: str | Path) -> dict[str, Path]:
    """The training stages of a checkpoint, oldest first: ``{"untrained": ..., "early": ..., "final": path}``.

    A stage is a sub-folder of ``path/snapshots/`` holding a config.json (a full checkpoint
    folder, written by ``python -m model.train --snapshot-steps``). The names in
    SNAPSHOT_STAGES come first in that order, any other stage after them by name; the
    checkpoint folder itself is always the last stage, "final" (a ``snapshots/final/`` folder
    is the same weights and is skipped). Only discovery: loading a stage validates it.
    """
    folder = Path(path)
    snapshots = folder / "snapshots"
    found = (
        {child.name: child for child in snapshots.iterdir() if (child / "config.json").is_file()}
        if snapshots.is_dir()
        else {}
    )
    found.pop(FINAL_STAGE, None)
    known = [name for name in SNAPSHOT_STAGES if name in found]
    others = sorted(name for name in found if name not in SNAPSHOT_STAGES and not name.startswith("."))
    return {**{name: found[name] for name in known + others}, FINAL_STAGE: folder}


def load_checkpoint(path: str | Path, device: str = "auto") -> Translator:
    """Load a checkpoint folder onto CUDA when available (then MPS, then CPU) -> Translator."""
    folder = Path(path)
    model, tokenizer = build_model(folder)
    card = read_card(folder)
    target, notices = resolve_device(device)
    return Translator(model.to(target), tokenizer, target, name=folder.name, card=card, notices=notices)
