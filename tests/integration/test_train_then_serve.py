"""Train -> serve on this machine: `train templates/tiny-lm-train-local.yaml --local` saves a Hugging Face
causal-LM directory (a Llama), and `apply <an LLM spec pointing at it> --local` serves those very weights: their loss on
the training text is the trained loss, not a random model's, and the endpoint's greedy answer is theirs."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).parents[2]
CORPUS = REPO / "templates" / "training" / "data" / "tiny-corpus.txt"


def corpus_loss(model, windows: int = 24, length: int = 64) -> float:
    import torch

    data = torch.tensor(list(CORPUS.read_bytes()))
    starts = torch.linspace(0, data.numel() - length - 2, windows).long().tolist()
    batch = torch.stack([data[start : start + length + 1] for start in starts])
    with torch.no_grad():
        logits = model(batch[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item()


def test_the_model_train_local_saved_is_served_with_its_trained_weights(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from integration.test_serving import free_port

    torch.set_num_threads(1)
    work = tmp_path / "train"
    trained = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "train", "templates/tiny-lm-train-local.yaml", "--local"]
        + ["--work-dir", str(work), "--hp", "max_steps=80", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    final_loss = dict(json.loads(trained.stdout)["losses"])[80]
    model_dir = work / "model"
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        path.name for path in model_dir.iterdir()
    }

    # The saved directory, loaded as any Hugging Face tool would, has the trained loss; a random model of the
    # same architecture is at ln(256) ≈ 5.5.
    loaded = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    torch.manual_seed(0)
    random_model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).eval()
    assert abs(corpus_loss(loaded) - final_loss) < 0.5 and final_loss < 4.0
    assert corpus_loss(random_model) > math.log(256) - 0.5

    spec = yaml.safe_load((REPO / "templates" / "tiny-lm-serve-local.yaml").read_text())
    spec["model"]["path"] = str(model_dir)
    spec_path = tmp_path / "serve.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "neurondeploy.cli", "apply", str(spec_path), "--local", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert process.stdout.readline().strip() == f"ready {url}", process.stderr.read()
        prompt = CORPUS.read_text()[:40]
        answer = httpx.post(
            f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 48, "temperature": 0}, timeout=60
        ).json()
        ids = torch.tensor([list(prompt.encode())])
        reference = loaded.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=48, do_sample=False)
        expected = bytes(reference[0, ids.shape[1] :].tolist()).decode(errors="replace")
        assert answer["choices"][0]["text"] == expected and answer["model"] == str(model_dir)
        assert sum(char.isascii() and char.isprintable() or char.isspace() for char in expected) > 40  # text-like

        chat = subprocess.run(
            [sys.executable, "-m", "neurondeploy.cli", "invoke", url, "--chat", "Tell me about Trainium"]
            + ["--max-tokens", "20"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert len(chat.stdout.encode()) >= 10 and "[length; 20 tokens" in chat.stderr
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert f"LlamaForCausalLM from {model_dir}" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
