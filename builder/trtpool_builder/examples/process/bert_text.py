"""process.py of the `bert_text` example: text in, a label out.

    TEXT  TYPE_STRING [1]   UTF-8 text
    LABEL TYPE_STRING [1]   the most likely class name
    SCORE TYPE_FP32   [1]   its softmax probability

A WordPiece tokenizer (the `tokenizers` library, BERT's normalizer and
pre-tokenizer, [CLS] ... [SEP]) from the folder's vocab.txt feeds the BERT
example; sequences are padded to a multiple of 16 so that requests of similar
length share a batch, and truncated to process.json's max_length. The
classifier head (head.npy: [hidden, classes] weights, then a bias row) runs on
pooler_output here, in postprocessing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.processors import TemplateProcessing

from trtpool.errors import Refused

PAD_TO_MULTIPLE = 16

_tokenizer: Tokenizer | None = None
_head = np.zeros((1, 1), np.float32)
_labels = np.array([], dtype=object)


def make_tokenizer(vocab_file: Path, max_length: int) -> Tokenizer:
    vocab = {token: index for index, token in enumerate(vocab_file.read_text().splitlines())}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = BertPreTokenizer()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(pad_id=vocab["[PAD]"], pad_to_multiple_of=PAD_TO_MULTIPLE)
    return tokenizer


def setup(model_config: dict, folder: Path) -> None:
    global _tokenizer, _head, _labels
    settings = json.loads((folder / "process.json").read_text())
    _tokenizer = make_tokenizer(folder / "vocab.txt", settings["max_length"])
    _head = np.load(folder / "head.npy")
    _labels = np.array([label.encode() for label in settings["labels"]], dtype=object)


def _text(element: int, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused.element(
            "TEXT", element, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at {exc.start})"
        ) from None


def preprocess(inputs: dict) -> dict:
    texts = [_text(element, row[0]) for element, row in enumerate(inputs["TEXT"])]
    assert _tokenizer is not None  # made by setup(), which Triton runs first
    encodings = _tokenizer.encode_batch(texts)
    return {
        "input_ids": np.array([e.ids for e in encodings], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
    }


def postprocess(outputs: dict, inputs: dict) -> dict:
    logits = outputs["pooler_output"].astype(np.float64) @ _head[:-1] + _head[-1]
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    best = probabilities.argmax(axis=1)
    return {
        "LABEL": _labels[best][:, None],
        "SCORE": probabilities[np.arange(len(best)), best].astype(np.float32)[:, None],
    }
