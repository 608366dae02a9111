"""The reference training script's model (neurondeploy/training/reference/tiny_lm.py) is transformers' LlamaForCausalLM: the
directory it saves loads as one and gives the same logits (grouped-query attention, rotary embeddings, RMSNorm,
SwiGLU); its layout rules say in one line what cannot split."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from neurondeploy.training.entry import REFERENCE_DIR

TRAINING = REFERENCE_DIR


@pytest.fixture(scope="module")
def tiny_lm():
    spec = importlib.util.spec_from_file_location("tiny_lm", TRAINING / "tiny_lm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiny_lm"] = module
    spec.loader.exec_module(module)
    return module


def test_the_saved_directory_is_a_llama_with_the_same_logits(tiny_lm, tmp_path):
    from transformers import LlamaForCausalLM

    config = tiny_lm.TinyLMConfig(vocab_size=300, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=96)
    torch.manual_seed(0)
    model = tiny_lm.TinyLM(config).eval()
    with torch.no_grad():  # norms away from ones, so a wrong mapping of any weight shows
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    tiny_lm.save_hugging_face_directory(model.state_dict(), config, tmp_path)
    llama = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert llama.config.num_key_value_heads == 2 and llama.config.intermediate_size == 96
    ids = torch.randint(0, 300, (3, 21))
    with torch.no_grad():
        ours, theirs = model(ids), llama(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()


@pytest.mark.parametrize(
    ("shape", "tp", "pp", "said"),
    [
        ({"heads": 4, "kv_heads": 4}, 8, 1, "heads 4 and kv_heads 4 must divide by tensor_parallel_size 8"),
        ({"heads": 32, "kv_heads": 8, "intermediate_size": 100}, 8, 1, "intermediate_size 100 must divide"),
        ({"heads": 6, "kv_heads": 4}, 1, 1, "heads 6 must divide by kv_heads 4"),
        ({"layers": 2}, 1, 4, "layers 2 must be at least pipeline_parallel_size 4"),
    ],
)
def test_a_layout_the_model_cannot_split_is_one_line(tiny_lm, shape, tp, pp, said):
    config = tiny_lm.TinyLMConfig(**{"hidden_size": 96, "intermediate_size": 256, **shape})
    with pytest.raises(SystemExit) as refused:
        config.check_layout(tp, pp)
    assert str(refused.value).startswith("error: ") and said in str(refused.value) and "\n" not in str(refused.value)


def test_the_flagship_shape_splits_at_tp_8():
    # templates/llama-pretrain-trn1-multinode.yaml's architecture at its TP, as the job builds it
    import tiny_lm

    config = tiny_lm.TinyLMConfig(vocab_size=128256, hidden_size=4096, layers=32, heads=32, kv_heads=8,
                                  intermediate_size=14336)  # fmt: skip
    assert config.layout_problems(8, 1) == []
