"""`data SPEC`: a text corpus as a training channel's tokenized dataset (training.token_dataset), packed to the
spec's sequence length with the model's tokenizer, written to a local directory and uploaded to the channel's S3
prefix.

Nothing is done twice: the local directory records the digest of the corpus and tokenizer it was made from (an
unchanged one is not packed again), and the S3 prefix holds that record last, after every shard (an unchanged
dataset is not uploaded again; an interrupted upload resends only the files S3 lacks, each carrying its sha256).
Files a previous dataset left at the prefix are removed, so the channel holds this dataset alone."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy.aws.errors import is_s3_missing_bucket, is_s3_missing_object
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.uploads import put_if_new
from neurondeploy.errors import NeurondeployError, SpecError
from neurondeploy.planner.checks import channel_path_problem
from neurondeploy.resources.naming import split_s3
from neurondeploy.specs import LoadedSpec
from neurondeploy.specs.inference import local_path
from neurondeploy.training.token_dataset import MARKER, DataError, Packed, pack_corpus

Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass
class DataRun:
    channel: str
    directory: Path
    packed: Packed
    built: bool  # packed now; False: the directory already held this corpus's dataset
    s3_uri: str | None = None  # where it was uploaded (None: not uploaded)
    channel_s3_uri: str | None = None  # the channel's s3_uri in the spec, uploaded to or not
    uploaded: list[str] = field(default_factory=list)  # files sent; empty when S3 already held it
    removed: list[str] = field(default_factory=list)  # a previous dataset's files taken off the prefix

    def as_dict(self) -> dict:
        return {
            "channel": self.channel,
            "directory": str(self.directory),
            "built": self.built,
            "s3_uri": self.s3_uri,
            "uploaded": self.uploaded,
            "removed": self.removed,
            "rows": self.packed.rows,
            "sequence_length": self.packed.sequence_length,
            "documents": self.packed.documents,
            "digest": self.packed.digest,
        }


def channel_of(loaded: LoadedSpec, name: str | None) -> str:
    spec = loaded.spec
    if spec.kind != "training":
        raise SpecError(f"{spec.name} is an inference spec; data fills a training spec's channels", None)
    tokenized = [channel for channel, c in spec.inputs.items() if c.format == "tokenized"]
    if name is None:
        if len(tokenized) != 1:
            raise SpecError(
                f"{loaded.source.file}: {'no' if not tokenized else 'more than one'} input channel has format: tokenized",
                "set inputs.<channel>.format: tokenized" if not tokenized else "name one with --channel",
            )
        return tokenized[0]
    if name not in spec.inputs:
        raise SpecError(
            f"{loaded.source.file}: no input channel {name}", f"channels: {', '.join(spec.inputs) or 'none'}"
        )
    if name not in tokenized:
        raise SpecError(
            f"{loaded.source.file}: input channel {name} has format: files; data writes a tokenized dataset",
            f"set inputs.{name}.format: tokenized",
        )
    return name


def prepare_data(
    loaded: LoadedSpec,
    corpus: Path,
    tokenizer: str,
    *,
    channel: str | None = None,
    out: Path | None = None,
    upload: bool = True,
    transport: AwsTransport | None = None,
    on_progress: Progress | None = None,
) -> DataRun:
    """Pack ``corpus`` for the spec's tokenized channel into ``out`` (default: the channel's local_path, else
    ``.neurondeploy/data/<name>/<channel>``), then, with ``upload`` and an s3_uri, upload it there."""
    spec = loaded.spec
    name = channel_of(loaded, channel)
    sequence_length = spec.hyperparameters.get("sequence_length")
    if not isinstance(sequence_length, int) or isinstance(sequence_length, bool) or sequence_length < 1:
        raise SpecError(
            f"{loaded.source.file}: hyperparameters.sequence_length is {sequence_length!r}",
            "set it to the tokens per sequence the job trains with",
        )
    source = spec.inputs[name]
    if out is None and (problem := channel_path_problem(loaded, name)):
        raise SpecError(f"{loaded.source.file}: {problem[0]}", problem[1])
    if out is None:
        out = (
            loaded.base_dir / source.local_path
            if source.local_path
            else Path(".neurondeploy") / "data" / spec.name / name
        )
    tokenizer_dir = local_path(tokenizer, Path.cwd())
    if not tokenizer_dir.is_dir():
        raise DataError(f"tokenizer {tokenizer} is not a directory", "give the model's directory (save_pretrained)")
    vocab = spec.architecture.vocab_size if spec.architecture else None
    packed, built = pack_corpus(
        corpus,
        tokenizer_dir,
        out,
        sequence_length,
        max_vocab_size=vocab,
        on_progress=(lambda done, total: on_progress("tokenize", done, total)) if on_progress else None,
    )
    run = DataRun(name, out, packed, built)
    run.channel_s3_uri = source.s3_uri
    if upload and source.s3_uri:
        run.s3_uri = source.s3_uri
        run.uploaded, run.removed = upload_dataset(
            transport or AwsTransport(spec.region), out, packed, source.s3_uri, on_progress
        )
    return run


def _uri(prefix: str, name: str) -> str:
    return f"{prefix.rstrip('/')}/{name}"


def _remote_marker(transport: AwsTransport, prefix: str) -> Packed | None:
    bucket, key = split_s3(_uri(prefix, MARKER))
    try:
        body = transport.call("s3", "GetObject", {"Bucket": bucket, "Key": key})["Body"].read()
    except AwsCallError as exc:
        if is_s3_missing_bucket(exc):
            raise NeurondeployError(
                f"bucket {bucket} does not exist ({prefix})", "create it, or fix the s3_uri"
            ) from None
        if is_s3_missing_object(exc):
            return None
        raise
    try:
        return Packed(**json.loads(body))
    except (ValueError, TypeError):
        return None


def upload_dataset(
    transport: AwsTransport, directory: Path, packed: Packed, prefix: str, on_progress: Progress | None = None
) -> tuple[list[str], list[str]]:
    """The dataset's files to ``prefix``, its record last; (files sent, a previous dataset's files removed)."""
    previous = _remote_marker(transport, prefix)
    if previous is not None and previous.digest == packed.digest:
        return [], []
    total = sum((directory / name).stat().st_size for name in packed.files)
    done, sent = 0, []
    for name in packed.files:
        body = (directory / name).read_bytes()
        if put_if_new(
            transport, _uri(prefix, name), body, hashlib.sha256(body).hexdigest(), "application/octet-stream"
        ):
            sent.append(name)
        done += len(body)
        if on_progress is not None:
            on_progress("upload", done, total)
    marker = (directory / MARKER).read_bytes()
    put_if_new(transport, _uri(prefix, MARKER), marker, packed.digest, "application/json")
    sent.append(MARKER)
    removed = sorted(set(previous.files) - set(packed.files)) if previous else []
    for name in removed:
        bucket, key = split_s3(_uri(prefix, name))
        transport.call("s3", "DeleteObject", {"Bucket": bucket, "Key": key})
    return sent, removed
