"""The translation models through fairseq's own entry points: small real runs, then generation."""

import copy
import re

import pytest
import torch
from conftest import console, run_command

import phm_fairseq
from phm_fairseq.models.export import densify

PLUGIN = str(phm_fairseq.__path__[0])
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
TRAINING = ["--user-dir", PLUGIN, "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "50", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--max-tokens", "2048", "--share-all-embeddings", "--dropout", "0.0", "--no-progress-bar",
            "--log-format", "simple", "--log-interval", "20", "--seed", "1", "--no-epoch-checkpoints"]
ARCHS = {
    "phm-n4-fused": ["--arch", "phm_transformer_demo", "--phm-n", "4"],
    "phm-n2-algebra-separate": ["--arch", "phm_transformer_demo", "--phm-n", "2", "--phm-rule", "algebra-init",
                                "--qkv-projection", "separate"],
    # four softmaxes over Hamilton-product logits learn to copy more slowly: 600 updates
    "quaternion-attention": ["--arch", "quaternion_transformer_demo", "--quaternion-attention", "--max-update", "600"],
    "quaternion-partial": ["--arch", "quaternion_transformer_partial_demo"],
    "dense-twin": ["--arch", "transformer_twin_demo"],
}


def train(data, save_dir, *extra, check=True):
    return run_command(console("fairseq-train"), data, "--save-dir", save_dir, *TRAINING, *TINY, *extra, check=check)


def losses(log: str, tag="train_inner") -> list:
    return [float(m) for m in re.findall(rf"\| {tag} \|.*?loss[= ]([\d.]+)", log)]


def hypotheses(log: str) -> dict:
    return {int(i): text for i, _, text in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", log, flags=re.M)}


@pytest.fixture(scope="module", params=list(ARCHS))
def trained(request, copy_task, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp(request.param)
    result = train(copy_task, save_dir, "--max-update", "300", *ARCHS[request.param])
    return request.param, save_dir / "checkpoint_best.pt", result.stdout + result.stderr


def test_copy_task_loss_falls_and_beam_search_copies(trained, copy_task):
    name, checkpoint, log = trained
    curve = losses(log)
    assert curve[-1] < 0.5 * curve[0], f"{name}: training loss {curve}"
    out = run_command(console("fairseq-generate"), copy_task, "--user-dir", PLUGIN, "--path", checkpoint,
                      "--gen-subset", "test", "--beam", "5", "--lenpen", "0.6", "--batch-size", "32",
                      "--required-batch-size-multiple", "1")
    sources = (copy_task.parent / "test.src").read_text().splitlines()
    hyps = hypotheses(out.stdout)
    assert sorted(hyps) == list(range(len(sources))), "every test sentence is translated"
    exact = sum(hyps[i] == sources[i] for i in hyps) / len(sources)
    assert exact >= 0.8, f"{name}: only {exact:.0%} of the copies are exact"


def load(checkpoint):
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    task.load_dataset("test")
    return models[0].eval(), task


def batch_of(task, size):
    dataset = task.dataset("test")
    return dataset.collater([dataset[i] for i in range(size)])["net_input"]


def test_beam_search_equals_full_re_decoding_and_incremental_steps_equal_full_pass(trained):
    from fairseq.models import FairseqDecoder

    _name, checkpoint, _log = trained
    model, task = load(checkpoint)
    net_input = batch_of(task, 8)
    with torch.no_grad():
        encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
        prev = net_input["prev_output_tokens"]
        full, _ = model.decoder(prev, encoder_out=encoder_out)
        state = {}
        steps = [model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0][:, -1]
                 for t in range(prev.size(1))]
    real = prev.ne(task.target_dictionary.pad())  # outputs at padding positions mean nothing
    torch.testing.assert_close(torch.stack(steps, dim=1)[real], full[real], rtol=1e-4, atol=1e-4)

    class FullReDecoding(FairseqDecoder):
        """Not an incremental decoder: fairseq's generator re-decodes the whole prefix each step."""

        def __init__(self, decoder):
            super().__init__(decoder.dictionary)
            self.inner = decoder

        def forward(self, prev_output_tokens, encoder_out=None, **kwargs):
            return self.inner(prev_output_tokens, encoder_out=encoder_out)

        def max_positions(self):
            return self.inner.max_positions()

    redecoding = copy.copy(model)
    redecoding.decoder = FullReDecoding(model.decoder)
    generate = lambda m: task.build_generator([m], type("Args", (), {"beam": 5, "lenpen": 0.6})()).generate(  # noqa: E731
        [m], {"net_input": net_input})
    for incremental, full_hyps in zip(generate(model), generate(redecoding)):
        assert [h["tokens"].tolist() for h in incremental] == [h["tokens"].tolist() for h in full_hyps]
        torch.testing.assert_close(torch.stack([h["score"] for h in incremental]),
                                   torch.stack([h["score"] for h in full_hyps]), rtol=1e-4, atol=1e-4)


def test_torchscript_export_of_the_dense_equivalent(trained):
    _name, checkpoint, _log = trained
    model, task = load(checkpoint)
    scripted = torch.jit.script(densify(copy.deepcopy(model)))
    batch = batch_of(task, 4)
    with torch.no_grad():
        expected = model(**batch)[0]
        torch.testing.assert_close(scripted(batch["src_tokens"], batch["src_lengths"], batch["prev_output_tokens"])[0],
                                   expected, rtol=1e-4, atol=1e-4)


def test_densify_keeps_the_function_and_drops_every_hypercomplex_layer(trained):
    from phm_fairseq.modules import PHMLinear

    _name, checkpoint, _log = trained
    model, task = load(checkpoint)
    dense = densify(copy.deepcopy(model))
    assert not any(isinstance(m, PHMLinear) for m in dense.modules())
    batch = batch_of(task, 4)
    with torch.no_grad():
        torch.testing.assert_close(dense(**batch)[0], model(**batch)[0], rtol=1e-5, atol=1e-5)
