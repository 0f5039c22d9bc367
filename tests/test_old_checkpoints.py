"""Checkpoints written before the model families became one model each still load and compute the
same function, and a seed still gives the same initial weights (fixtures: tests/fixtures)."""

import json
from pathlib import Path

import pytest
import torch
from fixtures.make_checkpoints import CHECKPOINTS, INIT, build_model, model_output, tensor_digest

import phm_fairseq  # noqa: F401  (registers the plugin)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = FIXTURES / "checkpoints" / "data"


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_old_checkpoint_loads_and_computes_the_same_outputs(name):
    from fairseq import checkpoint_utils

    data = CHECKPOINTS[name][0]
    models, cfg, _task = checkpoint_utils.load_model_ensemble_and_task(
        [str(FIXTURES / "checkpoints" / f"{name}.pt")], arg_overrides={"data": str(DATA / data)}
    )
    expected = torch.load(FIXTURES / "checkpoints" / f"{name}.output.pt", weights_only=True)
    model = models[0].eval()
    with torch.no_grad():
        torch.testing.assert_close(model_output(model, expected["net_input"]), expected["output"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(INIT))
def test_a_seed_gives_the_same_initial_weights_as_before(name):
    data, arguments = INIT[name]
    before = json.loads((FIXTURES / "init_digests.json").read_text())[name]
    now = {key: tensor_digest(value) for key, value in build_model(DATA / data, arguments).state_dict().items()}
    assert list(now) == list(before), "the same parameters, in the same order"
    assert now == before, [key for key in now if now[key] != before[key]]


ARCHITECTURES_ON_MAIN = {  # fairseq's ARCH_MODEL_REGISTRY on main (1686f26), the plugin's part
    "dense_transformer",
    "lstm_nli",
    "phm_lstm_nli",
    "phm_transformer",
    "phm_transformer_base",
    "phm_transformer_classifier",
    "phm_transformer_demo",
    "phm_transformer_iwslt",
    "quaternion_lstm_nli",
    "quaternion_transformer",
    "quaternion_transformer_base",
    "quaternion_transformer_classifier",
    "quaternion_transformer_demo",
    "quaternion_transformer_iwslt",
    "quaternion_transformer_partial_base",
    "quaternion_transformer_partial_demo",
    "quaternion_transformer_partial_iwslt",
    "transformer_classifier",
    "transformer_twin_base",
    "transformer_twin_demo",
    "transformer_twin_iwslt",
}


def test_every_architecture_name_is_still_registered():
    from fairseq.models import ARCH_MODEL_REGISTRY

    ours = {arch for arch, model in ARCH_MODEL_REGISTRY.items() if model.__module__.startswith("phm_fairseq.")}
    assert ours == ARCHITECTURES_ON_MAIN
