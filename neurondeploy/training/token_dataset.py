"""A text corpus as the tokenized dataset NxD Training's HF data module loads: ``datasets.load_from_disk(
data.train_dir)``, batched by ``transformers.default_data_collator``, the Llama module taking ``input_ids``,
``attention_mask`` and ``labels`` (aws-neuron/neuronx-distributed-training at 9169aa03:
``lightning_modules/data/hf_data_module.py``, ``lightning_modules/model/hf_models/llama_model.py``).

Documents are tokenized with the model's tokenizer, each followed by its end-of-sequence token, concatenated and cut
into blocks of exactly the sequence length; the remainder shorter than a block is dropped (the packing of
transformers' ``examples/pytorch/language-modeling/run_clm.py``, ``group_texts``). ``labels`` are the inputs
(the model shifts them), ``attention_mask`` all ones.

The directory is what ``Dataset.save_to_disk`` writes, written here with pyarrow: Arrow stream shards
``data-NNNNN-of-NNNNN.arrow`` of at most 500 MB (datasets' ``config.MAX_SHARD_SIZE``), their schema carrying the
features under the ``huggingface`` metadata key, ``dataset_info.json`` and ``state.json``; the column types are the
ones datasets gives these names (int32 input_ids, int8 attention_mask, int64 labels). Written so by datasets 3.0.0,
the version the pytorch-training-neuronx images install for NxD Training (aws-neuron/deep-learning-containers
``common/nxdt_requirements.txt``); the tests load it back with that version. ``neurondeploy-data.json`` beside them
names the corpus and tokenizer it was made from (its digest), so an unchanged corpus is neither packed nor uploaded
again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from neurondeploy.archive import file_sha256
from neurondeploy.errors import NeurondeployError
from neurondeploy.user_files import parse_user_json

FORMAT = 1  # of this module's output: part of the digest, so a change of packing rebuilds
MARKER = "neurondeploy-data.json"
# The longest document (line) a corpus may hold: a book is a few MiB; more is a file that is not one document a line.
MAX_DOCUMENT_BYTES = 32 * 2**20
DTYPES = {"input_ids": "int32", "attention_mask": "int8", "labels": "int64"}  # datasets' types for these names
SHARD_BYTES = 500 * 10**6
BATCH_ROWS = 1000  # rows per record batch, datasets' ArrowWriter default
CORPUS_SUFFIXES = (".jsonl", ".txt")
# The files that make a tokenizer (a model directory also holds weights, which do not change the tokens).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
TOKENIZER_SUFFIXES = (".model", ".txt", ".tiktoken")  # sentencepiece, vocab.txt / merges.txt, tiktoken


class DataError(NeurondeployError):
    """A corpus or tokenizer that cannot become the channel's dataset."""

    exit_code = 2


@dataclass
class Packed:
    """What ``neurondeploy-data.json`` records about a dataset directory."""

    format: int
    digest: str
    sequence_length: int
    rows: int
    tokens_dropped: int  # the last partial block
    documents: int
    vocab_size: int
    files: list[str]  # the directory's files, besides this record


def corpus_files(path: Path) -> list[Path]:
    """The corpus: a .jsonl or .txt file, or every such file under a directory, sorted; never a FIFO or device."""
    if path.exists() and not (path.is_file() or path.is_dir()):
        raise DataError(f"corpus {path} is not a regular file", "give a .jsonl or .txt file, or a directory of them")
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in CORPUS_SUFFIXES)
    else:
        raise DataError(f"corpus {path} does not exist", "give a .jsonl or .txt file, or a directory of them")
    if not files or any(p.suffix not in CORPUS_SUFFIXES for p in files):
        raise DataError(
            f"corpus {path} holds no .jsonl or .txt file" if not files else f"corpus {path} is not .jsonl or .txt",
            'give JSON lines with a "text" field, or text with one document per line',
        )
    return files


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of ``path``, each read with a cap: a corpus with one 200 MB line is refused after
    reading MAX_DOCUMENT_BYTES of it, not held whole in memory."""
    with path.open("rb") as handle:
        number = 0
        while raw := handle.readline(MAX_DOCUMENT_BYTES + 1):
            number += 1
            if len(raw) > MAX_DOCUMENT_BYTES and not raw.endswith(b"\n"):
                raise DataError(
                    f"{path}:{number}: a line of more than {MAX_DOCUMENT_BYTES // 2**20} MiB: a document is at most that",
                    "split the document into several lines (each line is a document)",
                )
            yield number, raw


def documents(files: Iterable[Path]) -> Iterator[tuple[str, int]]:
    """(document, its size in bytes): a JSON line's ``text``, or a non-empty line of a text file."""
    for path in files:
        for number, raw in _lines(path):
            if not raw.strip():
                continue
            if path.suffix == ".txt":
                yield raw.decode("utf-8", errors="replace").rstrip("\r\n"), len(raw)
                continue
            record = parse_user_json(
                raw, where=f"{path}:{number}: not a JSON line", fix="write one JSON object per line", error=DataError
            )
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise DataError(f'{path}:{number}: no string "text" field', 'give each line {"text": "..."}')
            yield record["text"], len(raw)


def tokenizer_files(directory: Path) -> list[Path]:
    files = sorted(
        p for p in directory.iterdir() if p.is_file() and (p.name in TOKENIZER_FILES or p.suffix in TOKENIZER_SUFFIXES)
    )
    if not files:
        raise DataError(
            f"{directory} holds no tokenizer (tokenizer.json, tokenizer_config.json, vocab or sentencepiece files)",
            "give --tokenizer the model's directory as Hugging Face saves it (save_pretrained)",
        )
    return files


def corpus_digest(corpus: list[Path], root: Path, tokenizer: list[Path], sequence_length: int) -> str:
    """What the dataset is made from: the packing's format, the sequence length, each corpus and tokenizer file."""
    digest = hashlib.sha256(f"neurondeploy-data {FORMAT} {sequence_length}\0".encode())
    for label, base, files in (("corpus", root, corpus), ("tokenizer", None, tokenizer)):
        for path in files:
            name = path.relative_to(base).as_posix() if base else path.name
            digest.update(f"{label}\0{name}\0{file_sha256(path)}\0".encode())
    return digest.hexdigest()


def read_marker(directory: Path) -> Packed | None:
    try:
        return Packed(**json.loads((directory / MARKER).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def load_tokenizer(directory: Path):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise NeurondeployError(
            "neurondeploy data tokenizes with transformers, which is not installed",
            "pip install 'neurondeploy[data]'",
        ) from None
    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise DataError(
            f"{directory}: the tokenizer does not load ({exc})".split("\n")[0], "give the model's directory"
        ) from None


def blocks(texts: Iterable[str], tokenizer, sequence_length: int, stats: dict) -> Iterator[list[int]]:
    """Token blocks of exactly ``sequence_length`` (module doc); ``stats`` gets documents and tokens_dropped."""
    separator = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    buffer: list[int] = []
    batch: list[str] = []

    def tokenize() -> Iterator[list[int]]:
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            buffer.extend(ids)
            if separator is not None:
                buffer.append(separator)
            while len(buffer) >= sequence_length:
                yield buffer[:sequence_length]
                del buffer[:sequence_length]
        stats["documents"] += len(batch)
        batch.clear()

    stats.setdefault("documents", 0)
    for text in texts:
        batch.append(text)
        if len(batch) == 256:
            yield from tokenize()
    if batch:
        yield from tokenize()
    stats["tokens_dropped"] = len(buffer)


def _features() -> dict[str, Any]:
    return {
        name: {"feature": {"dtype": dtype, "_type": "Value"}, "_type": "Sequence"} for name, dtype in DTYPES.items()
    }


def _pyarrow():
    try:
        import pyarrow
    except ImportError:
        raise NeurondeployError(
            "neurondeploy data writes Arrow shards with pyarrow, which is not installed",
            "pip install 'neurondeploy[data]'",
        ) from None
    return pyarrow


def write_dataset(rows: Iterable[list[int]], directory: Path, sequence_length: int) -> list[str]:
    """The blocks as a ``save_to_disk`` directory (module doc); returns the file names written."""
    pa = _pyarrow()

    features = _features()
    schema = pa.schema(
        [pa.field(name, pa.list_(getattr(pa, dtype)())) for name, dtype in DTYPES.items()],
        metadata={"huggingface": json.dumps({"info": {"features": features}})},
    )
    per_shard = max(
        1, SHARD_BYTES // (sequence_length * sum(pa.type_for_alias(t).bit_width // 8 for t in DTYPES.values()))
    )
    shards: list[Path] = []
    writer = None
    pending: list[list[int]] = []
    written_in_shard = 0

    def flush() -> None:
        nonlocal writer, written_in_shard
        if not pending:
            return
        if writer is None:
            shards.append(directory / f"shard-{len(shards)}.arrow")
            writer = pa.ipc.new_stream(str(shards[-1]), schema)
        ones = [[1] * sequence_length] * len(pending)
        columns = {"input_ids": pending, "attention_mask": ones, "labels": pending}
        writer.write_batch(pa.record_batch([pa.array(columns[n], type=schema.field(n).type) for n in DTYPES], schema))
        written_in_shard += len(pending)
        pending.clear()
        if written_in_shard >= per_shard:
            writer.close()
            writer, written_in_shard = None, 0

    for row in rows:
        pending.append(row)
        if len(pending) == BATCH_ROWS or written_in_shard + len(pending) >= per_shard:
            flush()
    flush()
    if writer is not None:
        writer.close()
    if not shards:
        raise DataError(
            f"the corpus makes no block of {sequence_length} tokens",
            "give a larger corpus, or lower hyperparameters.sequence_length",
        )
    names = []
    for index, path in enumerate(shards):
        name = f"data-{index:05d}-of-{len(shards):05d}.arrow"
        path.rename(directory / name)
        names.append(name)
    info = {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}
    (directory / "dataset_info.json").write_text(json.dumps(info, indent=2))
    state = {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": hashlib.sha256("".join(names).encode()).hexdigest()[:16],
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    (directory / "state.json").write_text(json.dumps(state, indent=2))
    return [*names, "dataset_info.json", "state.json"]


def read_blocks(directory: Path) -> list[list[int]]:
    """Every block's input_ids, in order, as pyarrow reads the shards ``state.json`` lists."""
    pa = _pyarrow()

    state = json.loads((directory / "state.json").read_text())
    rows: list[list[int]] = []
    for entry in state["_data_files"]:
        with pa.ipc.open_stream(str(directory / entry["filename"])) as reader:
            rows.extend(reader.read_all().column("input_ids").to_pylist())
    return rows


def pack_corpus(
    corpus: Path,
    tokenizer_dir: Path,
    out: Path,
    sequence_length: int,
    *,
    max_vocab_size: int | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[Packed, bool]:
    """The corpus as the dataset in ``out`` (module doc); (its record, whether it was built now: False when ``out``
    already holds this corpus and tokenizer's dataset). Written beside ``out`` and moved into place whole, so a
    failure leaves ``out`` as it was. ``max_vocab_size``: the model's, refused below the tokenizer's."""
    files = corpus_files(corpus)
    tokenizer_paths = tokenizer_files(tokenizer_dir)
    root = corpus if corpus.is_dir() else corpus.parent
    digest = corpus_digest(files, root, tokenizer_paths, sequence_length)
    existing = read_marker(out)
    if existing is not None and existing.digest == digest:
        return existing, False
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and existing is None)):
        raise DataError(
            f"{out} holds files neurondeploy data did not write; it would replace them",
            "give --out an empty or new directory",
        )
    tokenizer = load_tokenizer(tokenizer_dir)
    vocab = len(tokenizer)
    if max_vocab_size is not None and vocab > max_vocab_size:
        raise DataError(
            f"the tokenizer has {vocab} tokens; the model's vocab_size is {max_vocab_size}, so its embedding would "
            "be indexed out of range",
            "use the model's own tokenizer, or fix architecture.vocab_size",
        )
    total = sum(p.stat().st_size for p in files)
    done = 0

    def texts() -> Iterator[str]:
        nonlocal done
        for text, size in documents(files):
            done += size
            if on_progress is not None:
                on_progress(done, total)
            yield text

    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    made = [parent for parent in staging.parents if not parent.exists()]  # removed again on failure
    staging.mkdir(parents=True)
    try:
        stats: dict = {}
        rows = 0

        def counted() -> Iterator[list[int]]:
            nonlocal rows
            for block in blocks(texts(), tokenizer, sequence_length, stats):
                rows += 1
                yield block

        names = write_dataset(counted(), staging, sequence_length)
        packed = Packed(
            FORMAT, digest, sequence_length, rows, stats["tokens_dropped"], stats["documents"], vocab, names
        )
        (staging / MARKER).write_text(json.dumps(asdict(packed), indent=2))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for parent in made:  # innermost first
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
        raise
    return packed, True
