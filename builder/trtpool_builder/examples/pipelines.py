"""The pipeline examples' process files and the files they read, made deterministically.

    resnet50_jpeg   process/resnet50_jpeg.py, labels.txt (1000 class names), process.json; sample.jpg
    bert_text       process/bert_text.py, vocab.txt (WordPiece), head.npy (classifier), process.json; sample.txt

Nothing is downloaded: the names, the vocabulary and the classifier head come
from ``np.random.default_rng(seed)`` like the examples' weights, so the labels
a served example answers are synthetic (docs/modes.md). The sample beside the
model folder's config.pbtxt is a request for scripts/client.py --file.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtpool_builder.folder.process_folder import ProcessOptions

PROCESS_SOURCES = Path(__file__).resolve().parent / "process"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "ze",
    "ba",
    "do",
    "fu",
    "gi",
    "ha",
    "je",
    "po",
    "qu",
    "wi",
    "xo",
    "ye",
    "an",
    "el",
    "is",
    "on",
    "us",
    "er",
    "th",
    "st",
    "ch",
    "sh",
)
CLASSES = ("negative", "neutral", "positive")
MAX_PARTS = 4  # syllables in a word: 837,930 distinct words


@dataclass(frozen=True)
class ProcessExample:
    source: str  # a file in examples/process/
    inputs: tuple[str, ...]  # the outside face, NAME:TYPE:DIMS
    outputs: tuple[str, ...]
    write_files: Callable[[Path, dict[str, Any]], list[Path]]  # (folder, the model's options) -> files
    write_sample: Callable[[Path], Path]  # (the model folder) -> a file a client sends as the input

    def process_options(self, folder: Path, options: dict[str, Any]) -> ProcessOptions:
        """The process file and its files, written into `folder`, as trtpool-model takes them."""
        return ProcessOptions.parse(
            PROCESS_SOURCES / self.source, self.inputs, self.outputs, self.write_files(folder, options)
        )


def _words(rng: np.random.Generator, count: int) -> list[str]:
    """`count` distinct words of 1 to MAX_PARTS syllables, in a random order. Drawn as distinct
    indices into every such word, so it ends for any count up to their number (random words with
    a retry on a repeat never ended once count neared the words there were)."""
    sizes = [len(SYLLABLES) ** parts for parts in range(1, MAX_PARTS + 1)]
    if count > sum(sizes):
        raise ValueError(f"{count} distinct words asked for; there are {sum(sizes)} of 1 to {MAX_PARTS} syllables")
    words = []
    for index in rng.choice(sum(sizes), size=count, replace=False).tolist():
        parts = 1
        while index >= sizes[parts - 1]:
            index -= sizes[parts - 1]
            parts += 1
        syllables = []
        for _ in range(parts):  # every syllable has two letters: distinct indices, distinct words
            index, digit = divmod(index, len(SYLLABLES))
            syllables.append(SYLLABLES[digit])
        words.append("".join(syllables))
    return words


def _image_files(folder: Path, options: dict[str, Any]) -> list[Path]:
    rng = np.random.default_rng(options["seed"])
    labels = folder / "labels.txt"
    labels.write_text("".join(f"{word} {index}\n" for index, word in enumerate(_words(rng, 1000))))
    settings = folder / "process.json"
    settings.write_text(json.dumps({"image_size": options["image_size"]}) + "\n")
    return [labels, settings]


def _sample_image(folder: Path) -> Path:
    """A 320x240 JPEG of smooth noise (no photo ships with trtpool)."""
    from PIL import Image  # trtpool[pipelines], as the process file's

    coarse = np.random.default_rng(0).integers(0, 256, (15, 20, 3), dtype=np.uint8)
    path = folder / "sample.jpg"
    Image.fromarray(coarse).resize((320, 240), Image.Resampling.BILINEAR).save(path, "JPEG", quality=90)
    return path


def _sample_text(folder: Path) -> Path:
    path = folder / "sample.txt"
    path.write_text("kalo mine: the movie was great!\n")
    return path


def vocabulary(vocab_size: int, seed: int) -> list[str]:
    """BERT-style WordPiece tokens: specials, characters, '##' continuations, then whole words."""
    characters = list(string.ascii_lowercase + string.digits + string.punctuation)
    tokens = [*SPECIAL_TOKENS, *characters, *(f"##{c}" for c in string.ascii_lowercase + string.digits)]
    if vocab_size < len(tokens) + len(SYLLABLES):
        raise ValueError(
            f"bert_text: vocab_size {vocab_size} is too small for a WordPiece vocabulary "
            f"(at least {len(tokens) + len(SYLLABLES)})"
        )
    pieces = [*SYLLABLES, *(f"##{s}" for s in SYLLABLES)]
    count = vocab_size - len(tokens) - len(pieces)
    words = [w for w in _words(np.random.default_rng(seed), count + len(SYLLABLES)) if w not in SYLLABLES]
    return [*tokens, *pieces, *words[:count]]


def _text_files(folder: Path, options: dict[str, Any]) -> list[Path]:
    vocab = folder / "vocab.txt"
    vocab.write_text("".join(f"{token}\n" for token in vocabulary(options["vocab_size"], options["seed"])))
    rng = np.random.default_rng(options["seed"] + 1)
    head = folder / "head.npy"
    np.save(head, (rng.standard_normal((options["hidden"] + 1, len(CLASSES))) * 0.5).astype(np.float32))
    settings = folder / "process.json"
    settings.write_text(json.dumps({"max_length": options["max_positions"], "labels": list(CLASSES)}) + "\n")
    return [vocab, head, settings]


RESNET50_JPEG = ProcessExample(
    "resnet50_jpeg.py", ("IMAGE:STRING:1",), ("LABELS:STRING:5", "SCORES:FP32:5"), _image_files, _sample_image
)
BERT_TEXT = ProcessExample(
    "bert_text.py", ("TEXT:STRING:1",), ("LABEL:STRING:1", "SCORE:FP32:1"), _text_files, _sample_text
)
