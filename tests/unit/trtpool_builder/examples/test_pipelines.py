"""trtpool_builder.examples.pipelines: the pipeline examples' files, made deterministically and at
full size in bounded time, and the text example's vocabulary, refused beyond what its syllables make."""
from __future__ import annotations

import subprocess
import sys

import pytest

from trtpool_builder.examples import EXAMPLES
from trtpool_builder.examples.pipelines import SPECIAL_TOKENS, vocabulary


def test_the_text_examples_vocabulary_is_deterministic_and_unique():
    tokens = vocabulary(1000, seed=0)
    assert tokens == vocabulary(1000, seed=0) and len(tokens) == len(set(tokens)) == 1000
    assert tokens[:4] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


@pytest.mark.parametrize("name", ["resnet50_jpeg", "bert_text"])
def test_each_pipeline_examples_files_are_made_at_full_size_in_bounded_time(tmp_path, name):
    """What `trtpool-examples --names resnet50_jpeg bert_text` (docs/how-to/write-a-process-file.md) writes beside the ONNX
    file, at the examples' default (full) sizes, in a subprocess with a timeout: bert_text's
    vocabulary of 30522 asked for more words than its syllables made, and never ended (b7b529b)."""
    script = ("import sys; from pathlib import Path; from trtpool_builder.examples import EXAMPLES; "
              "e = EXAMPLES[sys.argv[1]]; e.process.write_files(Path(sys.argv[2]), e.options())")
    done = subprocess.run([sys.executable, "-c", script, name, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    if name == "bert_text":
        tokens = (tmp_path / "vocab.txt").read_text().splitlines()
        assert len(tokens) == len(set(tokens)) == EXAMPLES[name].options()["vocab_size"] == 30522
        assert tokens[:5] == list(SPECIAL_TOKENS) and "##ka" in tokens
    else:
        labels = [line.split()[0] for line in (tmp_path / "labels.txt").read_text().splitlines()]
        assert len(labels) == len(set(labels)) == 1000


def test_the_words_are_refused_beyond_what_the_syllables_make():
    """In a subprocess with a timeout: on b7b529b both calls looped for ever."""
    script = ("from trtpool_builder.examples.pipelines import vocabulary\n"
              "assert len(set(vocabulary(30522, seed=1))) == 30522\n"
              "vocabulary(900_000, seed=0)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: ") and last.endswith(" distinct words asked for; there are 837930 of 1 to "
                                                             "4 syllables"), done.stderr
