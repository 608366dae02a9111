"""neurondeploy reference training script: a Llama-style causal LM of the spec's architecture, data/tensor/pipeline
parallel, checkpoints, resume.

Start from it. It runs unchanged in three places:

* ``neurondeploy train SPEC --local``: torchrun on this machine's CPU with the gloo backend. Data parallel is
  DDP (ZeRO-1 with ``ZeroRedundancyOptimizer``), tensor parallel is DTensor (Megatron-style column/row
  sharding), pipeline parallel is ``torch.distributed.pipelining`` (GPipe or 1F1B micro-batches). Verified here.
* a SageMaker training job on ml.trn1 (``neurondeploy train SPEC``): the Neuron PyTorch training container
  runs it with torchrun, one process per NeuronCore. With torch-xla present the script trains on the XLA
  device (``xla`` process group, ``xm.reduce_gradients`` then the global-norm clip, ``xm.mark_step``,
  ``xm.save``); tensor parallel there is NxD Core's (``parallel_state.initialize_model_parallel``,
  ``ColumnParallelLinear`` / ``RowParallelLinear``, the TP-aware ``clip_grad_norm``) and ZeRO-1 is NxD's
  ``NeuronZero1Optimizer`` over the data-parallel groups. Pipeline parallel on Trainium is not done by this
  script (``neurondeploy validate`` refuses it). That path was run here only against CPU stand-ins of torch_xla
  and neuronx_distributed (tests/fixtures/fake_xla, fake_nxd), which prove the calls, the control flow and the
  layout's numerics, not Neuron: NOT run on Trainium.
* plain ``python train.py`` (one process).

The SageMaker contract it reads: hyperparameters as ``--key value`` arguments, ``SM_CHANNEL_TRAIN`` (text files,
read as bytes, or a tokenized dataset as ``neurondeploy data`` writes it, datasets' ``save_to_disk`` layout, read
as its ``input_ids``; default: a ``data/`` directory beside this script), ``SM_MODEL_DIR`` (final model),
``SM_OUTPUT_DATA_DIR`` (metrics.jsonl), and neurondeploy's ``NEURONDEPLOY_CHECKPOINT_DIR`` (the directory
SageMaker syncs with the checkpoint S3 URI), ``NEURONDEPLOY_RESUME`` and ``NEURONDEPLOY_MICROBATCHES``.

Every global batch is drawn from (seed, step) alone, so the same step sees the same data whatever the
layout, and a resumed run continues exactly where the saved one was.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_lm import (  # noqa: E402
    TinyLM,
    TinyLMConfig,
    apply_nxd_tensor_parallel,
    apply_tensor_parallel,
    causal_lm_loss,
    keep_pipeline_stage,
    save_hugging_face_directory,
)

CHECKPOINT_PREFIX = "step_"
COMPLETE_MARKER = "trainer.json"  # written last: a checkpoint directory without it is incomplete


def parse_bool(value: str) -> bool:
    # SageMaker passes hyperparameters as str(json-decoded value): True/False; users write true/1/yes.
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {value!r}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--max_steps", type=int, default=200)
    add("--learning_rate", type=float, default=3e-3)
    add("--warmup_steps", type=int, default=10)
    add("--weight_decay", type=float, default=0.01)
    add("--max_grad_norm", type=float, default=1.0, help="0 turns clipping off")
    add("--global_batch_size", type=int, default=16, help="sequences per optimizer step over all data-parallel ranks")
    add("--sequence_length", type=int, default=64)
    add("--seed", type=int, default=0)
    add("--log_every", type=int, default=10)
    add("--keep_checkpoints", type=int, default=3)
    # The model's sizes: neurondeploy passes the spec's architecture (its plan sized that model); these defaults
    # are a small model for a laptop.
    add("--hidden_size", type=int, default=TinyLMConfig.hidden_size)
    add("--layers", type=int, default=TinyLMConfig.layers)
    add("--heads", type=int, default=TinyLMConfig.heads)
    add("--kv_heads", type=int, default=TinyLMConfig.kv_heads)
    add("--intermediate_size", type=int, default=TinyLMConfig.intermediate_size)
    add("--vocab_size", type=int, default=TinyLMConfig.vocab_size)
    add("--gated_mlp", type=parse_bool, default=True, help="this script trains SwiGLU MLPs only")
    add("--experts", type=int, default=1, help="this script trains dense models only")
    add("--head_dim", type=int, default=0, help="0: hidden_size / heads, the only width this script builds")
    add("--tied_embeddings", type=parse_bool, default=False, help="this script trains an untied head only")
    # Set by neurondeploy from the spec's distribution and checkpoint sections.
    add("--tensor_parallel_size", type=int, default=1)
    add("--pipeline_parallel_size", type=int, default=1)
    add("--pipeline_schedule", choices=["gpipe", "1f1b"], default="gpipe")
    add("--zero1", type=parse_bool, default=False)
    add("--precision", choices=["fp32", "bf16-autocast", "bf16-stochastic-rounding"], default="fp32")
    add("--gradient_checkpointing", type=parse_bool, default=False)
    add("--checkpoint_every_steps", type=int, default=50)
    add(
        "--check_layout",
        action="store_true",
        help="check the model, layout and batch for $WORLD_SIZE processes (as the job's world), then exit",
    )
    add(
        "--device",
        choices=["auto", "cpu", "xla"],
        default="auto",
        help="auto: xla when torch-xla and a Neuron device exist",
    )
    args, unknown = parser.parse_known_args(argv)
    if unknown and int(os.environ.get("RANK", "0")) == 0:
        print(f"ignoring hyperparameters this script does not read: {' '.join(unknown)}", flush=True)
    return args


@dataclass
class Runtime:
    """Where this process sits: device, rank, and its coordinates in the (pipeline, data, tensor) mesh."""

    device: torch.device
    xla: bool
    rank: int
    world: int
    tp: int
    pp: int
    dp: int
    tp_rank: int = 0
    pp_rank: int = 0
    dp_rank: int = 0
    mesh: object = None

    @property
    def is_logger(self) -> bool:
        return self.rank == 0

    @property
    def is_host_leader(self) -> bool:
        """The first process on its host (torchrun's LOCAL_RANK 0): each host of a multi-instance job writes its
        own checkpoint directory, which SageMaker uploads to the one checkpoint S3 URI."""
        return int(os.environ.get("LOCAL_RANK", "0")) == 0

    def group(self, dim: str):
        return self.mesh[dim].get_group() if self.mesh is not None else None


def neuron_device_present() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch_xla") is not None and Path("/dev/neuron0").exists()


def microbatches(args: argparse.Namespace) -> int:
    return int(os.environ.get("NEURONDEPLOY_MICROBATCHES", "1")) if args.pipeline_parallel_size > 1 else 1


def check_job(args: argparse.Namespace, world: int) -> TinyLMConfig:
    """Everything about the job that can be wrong before training starts, for ``world`` processes: the model this
    script can build, its split over TP and PP, the processes over TP × PP, the batch over data-parallel ranks and
    micro-batches. One line and exit 1 for the first that is wrong (``--check_layout`` runs only this)."""
    config = model_config(args)
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    config.check_layout(tp, pp)
    if world % (tp * pp):
        raise SystemExit(
            f"error: {world} processes cannot hold tensor_parallel_size {tp} × pipeline_parallel_size {pp}; "
            "the processes must be a multiple of TP × PP"
        )
    dp, chunks = world // (tp * pp), microbatches(args)
    if args.global_batch_size % dp or (args.global_batch_size // dp) % chunks:
        raise SystemExit(
            f"error: global_batch_size {args.global_batch_size} must split into {dp} data-parallel "
            f"ranks × {chunks} micro-batches; change global_batch_size or microbatches"
        )
    return config


def setup_runtime(args: argparse.Namespace) -> Runtime:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    dp = world // (tp * pp)
    xla = args.device == "xla" or (args.device == "auto" and neuron_device_present())
    if xla:
        return setup_xla_runtime(args, rank, world, tp, pp)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    if world > 1 or "MASTER_ADDR" in os.environ:
        dist.init_process_group("gloo")
    runtime = Runtime(device=torch.device("cpu"), xla=False, rank=rank, world=world, tp=tp, pp=pp, dp=dp)
    if dist.is_initialized():
        from torch.distributed.device_mesh import init_device_mesh

        runtime.mesh = init_device_mesh("cpu", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
        runtime.pp_rank, runtime.dp_rank, runtime.tp_rank = (
            runtime.mesh[d].get_local_rank() for d in ("pp", "dp", "tp")
        )
    return runtime


def uses_nxd(args: argparse.Namespace, tp: int) -> bool:
    """On Trainium, tensor parallel and ZeRO-1 come from NxD Core (neuronx_distributed)."""
    return tp > 1 or args.zero1


def setup_xla_runtime(args: argparse.Namespace, rank: int, world: int, tp: int, pp: int) -> Runtime:
    """Trainium: the ``xla`` process group, then NxD's tensor / data parallel groups (TP groups are consecutive
    ranks, so a TP group stays on one instance's NeuronCores)."""
    if pp > 1:
        raise SystemExit(
            "error: this reference script does not pipeline on Trainium (NxD's pipeline engine is not used); "
            "set pipeline_parallel: 1 and use tensor / data parallel"
        )
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_backend  # noqa: F401  registers the "xla" process group backend

    dist.init_process_group("xla")
    runtime = Runtime(device=xm.xla_device(), xla=True, rank=rank, world=world, tp=tp, pp=1, dp=world // tp)
    if uses_nxd(args, tp):
        from neuronx_distributed.parallel_layers import parallel_state

        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
        runtime.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        runtime.dp_rank = parallel_state.get_data_parallel_rank()
    else:
        runtime.dp_rank = rank
    return runtime


def xla_optimizer(args: argparse.Namespace, rt: Runtime, model):
    """AdamW, or NxD's ZeRO-1 over the data-parallel groups (it reduces, clips and all-gathers itself)."""
    if not args.zero1:
        return torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    from neuronx_distributed.optimizer import NeuronZero1Optimizer
    from neuronx_distributed.parallel_layers import parallel_state

    return NeuronZero1Optimizer(
        model.parameters(),
        torch.optim.AdamW,
        lr=args.learning_rate,
        weight_decay=args.weight_decay,
        pin_layout=False,
        grad_clipping=args.max_grad_norm > 0,
        max_norm=args.max_grad_norm or None,
        sharding_groups=parallel_state.get_data_parallel_group(as_list=True),
        grad_norm_groups=parallel_state.get_tensor_model_parallel_group(as_list=True),
    )


def xla_step(args: argparse.Namespace, rt: Runtime, model, optimizer):
    """Reduce the gradients over each data-parallel group, clip to the global norm, step, run the graph."""
    import torch_xla.core.xla_model as xm

    if args.zero1:
        optimizer.step()  # NeuronZero1Optimizer: reduce-scatter, global-norm clip, shard step, all-gather
        grad_norm = optimizer.grad_norm
    else:
        if uses_nxd(args, rt.tp):
            from neuronx_distributed.parallel_layers import clip_grad_norm, parallel_state

            xm.reduce_gradients(optimizer, groups=parallel_state.get_data_parallel_group(as_list=True))
            grad_norm = clip_grad_norm(model.parameters(), args.max_grad_norm or float("inf"))
        else:
            xm.reduce_gradients(optimizer)  # all-reduce over the replicas first, so the clip sees the global norm
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm or float("inf"))
        optimizer.step()
    xm.mark_step()  # run the step's graph on the NeuronCore
    return grad_norm


def xla_state_file(args: argparse.Namespace, rt: Runtime) -> tuple[str, bool]:
    """(file, written by the master only): one file for data parallel; a file per rank when its model holds a
    tensor-parallel slice or its optimizer a ZeRO-1 shard."""
    if not uses_nxd(args, rt.tp):
        return "xla_state.pt", True
    return f"xla_state.tp{rt.tp_rank:02d}.dp{rt.dp_rank:02d}.pt", False


def xla_full_state(model, rt: Runtime) -> dict:
    """The unsplit state dict on the CPU: tensor-parallel slices gathered over the TP group (every rank takes part)."""
    state = {}
    params = dict(model.named_parameters())
    for name, value in model.state_dict().items():
        param = params.get(name)
        if rt.tp > 1 and getattr(param, "tensor_model_parallel", False):
            from neuronx_distributed.parallel_layers import parallel_state

            parts = [torch.empty_like(value) for _ in range(rt.tp)]
            dist.all_gather(parts, value.contiguous(), group=parallel_state.get_tensor_model_parallel_group())
            value = torch.cat(parts, dim=param.partition_dim)
        state[name] = value.cpu()
    return state


# --- data ------------------------------------------------------------------------------------------------


def load_corpus() -> tuple[torch.Tensor, bool]:
    """The train channel as one stream of token ids, and whether they are a tokenizer's (else bytes of text)."""
    directory = Path(os.environ.get("SM_CHANNEL_TRAIN") or Path(__file__).resolve().parent / "data")
    if (directory / "state.json").is_file():
        return load_token_dataset(directory), True
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in (".txt", ".md"))
    if not files:
        raise SystemExit(f"error: no .txt or .md files in {directory} (the train channel)")
    data = b"\n".join(p.read_bytes() for p in files)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long(), False


def load_token_dataset(directory: Path) -> torch.Tensor:
    """A datasets ``save_to_disk`` directory: ``state.json`` lists its Arrow stream shards in order, each row a
    packed block of ``input_ids``; the blocks, concatenated, are the corpus's token stream again. Read with pyarrow,
    which the training images install with datasets 3.0.0 (aws-neuron/deep-learning-containers
    ``common/nxdt_requirements.txt``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    state = json.loads((directory / "state.json").read_text())
    streams = []
    for entry in state["_data_files"]:
        with pa.ipc.open_stream(str(directory / entry["filename"])) as reader:
            ids = pc.list_flatten(reader.read_all().column("input_ids"))
        streams.append(torch.from_numpy(ids.to_numpy().astype("int64")))
    if not streams or sum(s.numel() for s in streams) == 0:
        raise SystemExit(f"error: the tokenized dataset in {directory} holds no tokens (the train channel)")
    return torch.cat(streams)


def global_batch(corpus: torch.Tensor, step: int, args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's whole batch: a function of (seed, step) only, so layouts and resumed runs agree."""
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    length = args.sequence_length
    if corpus.numel() <= length + 1:
        raise SystemExit(f"error: the corpus ({corpus.numel()} tokens) is shorter than sequence_length {length}")
    starts = torch.randint(0, corpus.numel() - length - 1, (args.global_batch_size,), generator=generator)
    windows = torch.stack([corpus[s : s + length + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


# --- model and optimizer -----------------------------------------------------------------------------------


def model_config(args: argparse.Namespace) -> TinyLMConfig:
    """The model the arguments describe, or the one line saying why this script cannot train it."""
    refused = []
    if not args.gated_mlp:
        refused.append("gated_mlp false: this script trains Llama-style SwiGLU MLPs only")
    if args.experts > 1:
        refused.append(f"experts {args.experts}: this script trains dense models only")
    if args.head_dim and args.head_dim * args.heads != args.hidden_size:
        refused.append(f"head_dim {args.head_dim}: this script's heads are hidden_size / heads wide")
    if args.tied_embeddings:
        refused.append("tied_embeddings true: this script trains an untied head only")
    if args.vocab_size < 256:
        refused.append(f"vocab_size {args.vocab_size}: the corpus is bytes, ids up to 255")
    if refused:
        raise SystemExit("error: " + "; ".join(refused))
    return TinyLMConfig(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        intermediate_size=args.intermediate_size,
        max_positions=max(256, args.sequence_length),
    )


def build(args: argparse.Namespace, config: TinyLMConfig, rt: Runtime):
    torch.manual_seed(args.seed)  # every rank builds the same full model, then keeps its part
    model = TinyLM(config)
    model.gradient_checkpointing = args.gradient_checkpointing
    if rt.pp > 1:
        model = keep_pipeline_stage(model, rt.pp_rank, rt.pp)
    if args.precision == "bf16-stochastic-rounding":
        # Full bf16 weights. Neuron rounds stochastically (NEURON_RT_STOCHASTIC_ROUNDING_EN=1); a CPU rounds to nearest.
        model = model.to(torch.bfloat16)
    if rt.xla and rt.tp > 1:
        model = apply_nxd_tensor_parallel(model)  # NxD layers are made on the CPU, then moved
    model = model.to(rt.device)
    if rt.tp > 1 and not rt.xla:
        model = apply_tensor_parallel(model, rt.mesh["tp"])
    trained = model
    pure_data_parallel = rt.dp > 1 and rt.tp == 1 and rt.pp == 1 and not rt.xla
    if pure_data_parallel:
        from torch.nn.parallel import DistributedDataParallel

        trained = DistributedDataParallel(model)
    if rt.xla:
        optimizer = xla_optimizer(args, rt, model)
    elif args.zero1 and pure_data_parallel:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer = ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.AdamW, lr=args.learning_rate, weight_decay=args.weight_decay
        )
    else:
        if args.zero1 and rt.is_logger:
            print("zero1: applies to pure data parallel in this script; ignored for this layout", flush=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    schedule = None
    if rt.pp > 1:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        stage = PipelineStage(model, rt.pp_rank, rt.pp, rt.device, group=rt.group("pp"))
        schedule_class = ScheduleGPipe if args.pipeline_schedule == "gpipe" else Schedule1F1B
        schedule = schedule_class(stage, n_microbatches=microbatches(args), loss_fn=causal_lm_loss)
    return model, trained, optimizer, schedule


def autocast(args: argparse.Namespace, rt: Runtime):
    import contextlib

    if args.precision != "bf16-autocast":
        return contextlib.nullcontext()
    return torch.autocast("xla" if rt.xla else "cpu", dtype=torch.bfloat16)


def train_step(batch, args, rt: Runtime, trained, schedule) -> torch.Tensor:
    """Forward and backward of this rank's share; returns its mean loss (0 on ranks that do not see the loss)."""
    inputs, targets = batch
    with autocast(args, rt):
        if schedule is None:
            loss = causal_lm_loss(trained(inputs), targets)
        elif rt.pp_rank == 0:
            schedule.step(inputs)
            return torch.zeros(())
        elif rt.pp_rank == rt.pp - 1:
            losses: list[torch.Tensor] = []
            schedule.step(target=targets, losses=losses)
            return torch.stack(losses).mean().detach().float()
        else:
            schedule.step()
            return torch.zeros(())
    loss.backward()
    return loss.detach().float()


def average_gradients_over_data_parallel(model, rt: Runtime) -> None:
    """DDP does this itself; with tensor or pipeline parallel too, each data-parallel group averages here."""
    group = rt.group("dp")
    for param in model.parameters():
        if param.grad is not None:
            local = param.grad.to_local() if hasattr(param.grad, "to_local") else param.grad
            dist.all_reduce(local, group=group)
            local.div_(rt.dp)


def clip_gradients(model, max_norm: float, rt: Runtime) -> float:
    """Global gradient norm over tensor shards and pipeline stages (torch's clip_grad_norm_ sees only this rank)."""
    sharded = torch.zeros((), dtype=torch.float64)
    replicated = torch.zeros((), dtype=torch.float64)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    for grad in grads:
        if hasattr(grad, "to_local"):
            sharded += grad.to_local().double().pow(2).sum()
        else:
            replicated += grad.double().pow(2).sum()
    if rt.tp > 1:
        dist.all_reduce(sharded, group=rt.group("tp"))
    total = sharded + replicated
    if rt.pp > 1:
        dist.all_reduce(total, group=rt.group("pp"))
    norm = math.sqrt(total.item())
    if max_norm > 0 and norm > max_norm:
        for grad in grads:
            grad.mul_(max_norm / (norm + 1e-6))
    return norm


def step_loss(local_loss: torch.Tensor, rt: Runtime) -> float:
    """The step's loss over the whole global batch: the mean of the data-parallel ranks' losses, counted once
    per data-parallel rank (from the last pipeline stage, first tensor rank)."""
    if not dist.is_initialized():
        return local_loss.item()
    counted = rt.pp_rank == rt.pp - 1 and rt.tp_rank == 0
    # float32 on the loss's device: the xla backend reduces device tensors, and NeuronCores have no float64.
    value = (local_loss if counted else torch.zeros((), device=local_loss.device)).reshape(1).float()
    dist.all_reduce(value)
    return value.item() / rt.dp


# --- checkpoints ---------------------------------------------------------------------------------------------


def checkpoint_root() -> Path:
    return Path(os.environ.get("NEURONDEPLOY_CHECKPOINT_DIR") or "/opt/ml/checkpoints")


def latest_checkpoint(root: Path) -> Path | None:
    complete = [p for p in root.glob(f"{CHECKPOINT_PREFIX}*") if (p / COMPLETE_MARKER).is_file()]
    return max(complete, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]), default=None)


def barrier(rt: Runtime) -> None:
    if dist.is_initialized():
        dist.barrier()


def flat_options():
    """Optimizer state keyed per parameter name: pipeline stages hold different parameters, so a shared
    "param_groups" entry (the unflattened form) would be written by one stage and read back by all."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def is_zero1(optimizer) -> bool:
    return type(optimizer).__name__ == "ZeroRedundancyOptimizer"


def save_checkpoint(step: int, args, rt: Runtime, model, optimizer) -> Path:
    """Written to a temporary directory and renamed once every rank has written: a run killed while saving
    leaves no checkpoint that looks complete. Sharded (torch.distributed.checkpoint), so TP/PP ranks write their
    own parts and a later run may load them into another layout. On several hosts each host's first process
    prepares and completes its host's directory: the checkpoint is the union of the hosts' files, as the checkpoint
    S3 URI gathers them and a resumed job downloads them to every host."""
    root = checkpoint_root()
    final = root / f"{CHECKPOINT_PREFIX}{step:08d}"
    partial = root / f".partial-{final.name}"
    if rt.is_host_leader:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    barrier(rt)
    if rt.xla:
        import torch_xla.core.xla_model as xm

        name, master_only = xla_state_file(args, rt)
        xm.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, str(partial / name), master_only)
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        flat = flat_options()

        if is_zero1(optimizer):
            optimizer.consolidate_state_dict(to=0)
            if rt.is_logger:
                torch.save(optimizer.state_dict(), partial / "zero1_optimizer.pt")
            state = {"model": get_model_state_dict(model)}
        else:
            model_state, optimizer_state = get_state_dict(model, optimizer, options=flat)
            state = {"model": model_state, "optimizer": optimizer_state}
        dcp.save(state, checkpoint_id=str(partial))
    barrier(rt)
    if rt.is_host_leader:
        layout = {"tensor_parallel": rt.tp, "pipeline_parallel": rt.pp, "data_parallel": rt.dp}
        (partial / COMPLETE_MARKER).write_text(
            json.dumps({"step": step, "layout": layout, "precision": args.precision})
        )
        partial.rename(final)
        for old in sorted(root.glob(f"{CHECKPOINT_PREFIX}*"))[: -args.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
    barrier(rt)
    return final


def load_checkpoint(path: Path, args, rt: Runtime, model, optimizer) -> int:
    meta = json.loads((path / COMPLETE_MARKER).read_text())
    if rt.xla:
        name, _ = xla_state_file(args, rt)
        if not (path / name).is_file():
            raise SystemExit(
                f"error: {path} was saved by layout {meta['layout']} and has no {name}; on Trainium resume with "
                "the layout that saved it"
            )
        state = torch.load(path / name, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return meta["step"]
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    flat = flat_options()

    if is_zero1(optimizer):
        state = {"model": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=str(path))
        set_model_state_dict(model, state["model"])
        optimizer.load_state_dict(torch.load(path / "zero1_optimizer.pt", map_location="cpu", weights_only=False))
    else:
        model_state, optimizer_state = get_state_dict(model, optimizer, options=flat)
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"], options=flat
        )
    return meta["step"]


def save_final_model(config: TinyLMConfig, rt: Runtime, model, byte_tokenizer: bool) -> None:
    """SM_MODEL_DIR gets one full, unsharded state dict (SageMaker uploads it as model.tar.gz), as TinyLM's
    model.pt and as a Hugging Face causal-LM directory that `neurondeploy serve` and the vLLM container load (with
    the byte-level tokenizer when it trained on bytes; a tokenized dataset's tokenizer is the user's to add)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if rt.xla:
        import torch_xla.core.xla_model as xm

        state = xla_full_state(model, rt)
        parts = [state]
        xm.rendezvous("final-model")
    else:
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
        mine = state if (rt.dp_rank == 0 and rt.tp_rank == 0) else {}
        parts = [None] * rt.world
        if dist.is_initialized():
            dist.all_gather_object(parts, mine)
        else:
            parts = [mine]
    if rt.is_logger:
        full = {k: v.detach().cpu().clone() for part in parts for k, v in part.items()}
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(full, model_dir / "model.pt")  # TinyLM's own names, for tiny_lm.TinyLM.load_state_dict
        (model_dir / "tiny_lm_config.json").write_text(config.to_json())
        save_hugging_face_directory(full, config, model_dir, byte_tokenizer)  # config.json, weights, tokenizer


# --- loop ----------------------------------------------------------------------------------------------------


class StopFlag:
    """SIGTERM (spot interruption, `neurondeploy stop`, torchrun stopping) or Ctrl-C: finish the step, save, exit."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_):
        self.requested = True

    def agreed(self, rt: Runtime) -> bool:
        if not dist.is_initialized() or rt.xla:
            return self.requested
        flag = torch.tensor([1 if self.requested else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        return bool(flag.item())


def main(argv: list[str] | None = None) -> int:
    # torch.distributed.checkpoint warns on every save without a process group; one process is a valid layout.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    args = parse_args(argv)
    config = check_job(args, int(os.environ.get("WORLD_SIZE", "1")))
    if args.check_layout:
        with torch.device("meta"):  # shapes only: the flagship's 8B parameters are not allocated here
            params = sum(p.numel() for p in TinyLM(config).parameters())
        print(
            f"layout ok: {params:,} parameters over {os.environ.get('WORLD_SIZE', '1')} processes, "
            f"TP={args.tensor_parallel_size} PP={args.pipeline_parallel_size}",
            flush=True,
        )
        return 0
    rt = setup_runtime(args)
    stop = StopFlag()
    model, trained, optimizer, schedule = build(args, config, rt)
    corpus, tokenized = load_corpus()
    largest = int(corpus.max())
    if largest >= config.vocab_size:
        raise SystemExit(
            f"error: the train channel holds token id {largest}, beyond vocab_size {config.vocab_size}; "
            "tokenize it with the model's tokenizer"
        )
    start = 0
    latest = latest_checkpoint(checkpoint_root()) if os.environ.get("NEURONDEPLOY_RESUME", "1") == "1" else None
    if latest is not None:
        start = load_checkpoint(latest, args, rt, model, optimizer)
        if rt.is_host_leader:  # every host's log says what it loaded
            print(f"resumed from checkpoint step {start} ({latest})", flush=True)
    if rt.is_logger:
        params = sum(p.numel() for p in model.parameters())
        print(
            f"training {params:,} parameters on {rt.world} processes ({'xla' if rt.xla else 'cpu'}): "
            f"TP={rt.tp} PP={rt.pp} DP={rt.dp}, {args.precision}, gradient checkpointing "
            f"{'on' if args.gradient_checkpointing else 'off'}, steps {start}..{args.max_steps}",
            flush=True,
        )
    metrics_path = Path(os.environ.get("SM_OUTPUT_DATA_DIR", "output")) / "metrics.jsonl"
    if rt.is_logger:
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
    per_rank = args.global_batch_size // rt.dp
    model.train()
    step = start
    while step < args.max_steps:
        began = time.perf_counter()
        inputs, targets = global_batch(corpus, step, args)
        rows = slice(rt.dp_rank * per_rank, (rt.dp_rank + 1) * per_rank)
        batch = (inputs[rows].to(rt.device), targets[rows].to(rt.device))
        for group in optimizer.param_groups:
            group["lr"] = args.learning_rate * min(1.0, (step + 1) / max(1, args.warmup_steps))
        local_loss = train_step(batch, args, rt, trained, schedule)
        if rt.xla:
            grad_norm = xla_step(args, rt, model, optimizer)
        else:
            if rt.dp > 1 and trained is model:
                average_gradients_over_data_parallel(model, rt)
            grad_norm = clip_gradients(model, args.max_grad_norm, rt)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        logging_step = step % args.log_every == 0 or step == args.max_steps or step == start + 1
        if logging_step:
            loss = step_loss(local_loss, rt)
            seconds = time.perf_counter() - began
            if rt.is_logger:
                tokens = args.global_batch_size * args.sequence_length
                print(
                    f"step {step}/{args.max_steps} loss {loss:.4f} {seconds * 1000:.1f} ms/step "
                    f"{tokens / seconds:,.0f} tokens/s",
                    flush=True,
                )
                record = {"step": step, "loss": loss, "step_seconds": seconds, "grad_norm": float(grad_norm)}
                with metrics_path.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
        stopping = stop.agreed(rt)
        if step % args.checkpoint_every_steps == 0 or step == args.max_steps or stopping:
            path = save_checkpoint(step, args, rt, model, optimizer)
            if rt.is_logger:
                print(f"checkpoint step {step} saved to {path}", flush=True)
        if stopping:
            if rt.is_logger:
                print(f"stopped at step {step} on a stop signal; the next run resumes from it", flush=True)
            break
    else:
        save_final_model(config, rt, model, byte_tokenizer=not tokenized)
        if rt.is_logger:
            print(f"done: {step} steps; model in {os.environ.get('SM_MODEL_DIR', 'model')}", flush=True)
    if dist.is_initialized():
        # every rank leaves together: one that tore its group down while the logger still wrote the final model
        # ended in "terminate called without an active exception" (SIGABRT) once, under load
        barrier(rt)
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
