"""intervene() against independent references: plain torch hooks written here and nnsight 0.7, on tiny Llama (4
query / 2 KV heads), GPT-2 and BERT models; bit-identity of a zero addition; the untouched model; bad input."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from interp_widgets.interventions import Ablate, Add, Clamp, intervene, reference_activations
from interp_widgets.layers import UnsupportedModelError
from tests import tiny_models
from tests.conftest import model_fingerprint

TOL = 1e-5
IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])
BERT_IDS = torch.tensor([[101, 2204, 2143, 2001, 103, 102]])


@dataclass(frozen=True)
class Sites:
    """Where each point lives in one family, written out by hand: (block list, module path in a block, 'input' or
    'output', index in a tuple output)."""

    build: Callable
    blocks: str
    attn_out: tuple
    mlp_out: tuple
    resid_mid: tuple
    out_proj: str
    ids: torch.Tensor


FAMILIES = {
    "llama": Sites(
        tiny_models.llama_lm,
        "model.layers",
        ("self_attn", "output", 0),
        ("mlp", "output", None),
        ("post_attention_layernorm", "input", None),
        "self_attn.o_proj",
        IDS,
    ),
    "gpt2": Sites(
        tiny_models.gpt2_lm,
        "transformer.h",
        ("attn", "output", 0),
        ("mlp", "output", None),
        ("ln_2", "input", None),
        "attn.c_proj",
        IDS,
    ),
    "bert": Sites(
        tiny_models.bert_masked_lm,
        "bert.encoder.layer",
        ("attention.output.dense", "output", None),
        ("output.dense", "output", None),
        ("attention", "output", 0),
        "attention.output.dense",
        BERT_IDS,
    ),
}
POINTS = ["layer:1.resid_pre", "layer:0", "layer:1.attn_out", "layer:0.mlp_out", "layer:1.resid_mid", "layer:1.head:1"]


def _block(model, sites: Sites, i: int):
    return model.get_submodule(sites.blocks)[i]


def where(model, sites: Sites, point: str):
    """(module, 'input' | 'output', tuple index, head slice or None) of a point, from the table above."""
    layer, _, sub = point.partition(".")
    block = _block(model, sites, int(layer.split(":")[1]))
    if sub == "":
        return block, "output", 0 if isinstance(block, torch.nn.Module) else None, None
    if sub == "resid_pre":
        return block, "input", None, None
    if sub.startswith("head:"):
        head = int(sub.split(":")[1])
        n_heads = model.config.num_attention_heads if hasattr(model.config, "num_attention_heads") else None
        width = model.config.hidden_size // n_heads
        return block.get_submodule(sites.out_proj), "input", None, slice(head * width, (head + 1) * width)
    path, site, index = getattr(sites, sub)
    return block.get_submodule(path), site, index, None


def plain_hook(model, sites: Sites, point: str, fn: Callable, positions):
    """Install a torch hook, written from scratch, that applies ``fn`` to the selected slice; returns its handle."""
    module, site, _, head = where(model, sites, point)
    cols = slice(None) if head is None else head

    def edit(hidden):
        hidden = hidden.clone()
        hidden[:, positions, cols] = fn(hidden[:, positions, cols])
        return hidden

    if site == "input":

        def pre(mod, args, kwargs):
            if point.endswith("resid_mid"):  # the norm's input is also the residual carried past the MLP
                args[0].copy_(edit(args[0]))
                return None
            if args:
                return (edit(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": edit(kwargs["hidden_states"])}

        return module.register_forward_pre_hook(pre, with_kwargs=True)

    def post(mod, args, output):
        if isinstance(output, tuple):
            return (edit(output[0]), *output[1:])
        return edit(output)

    return module.register_forward_hook(post)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def nnsight_patch(model, sites: Sites, point: str, value: torch.Tensor, position: int) -> torch.Tensor:
    """The logits of nnsight 0.7 setting ``value`` at ``point`` and ``position`` (on a copy of the model: nnsight
    wraps the modules it traces)."""
    from nnsight import NNsight

    twin = copy.deepcopy(model)
    traced = NNsight(twin)
    layer, _, sub = point.partition(".")
    path, site, tuple_index, head = f"{sites.blocks}.{layer.split(':')[1]}", "output", None, None
    if sub == "resid_pre":
        site = "input"
    elif sub.startswith("head:"):
        path, site = f"{path}.{sites.out_proj}", "input"
        head = int(sub.split(":")[1])
    elif sub:
        inner, site, tuple_index = getattr(sites, sub)
        path = f"{path}.{inner}"
    with torch.no_grad(), traced.trace(input_ids=sites.ids):
        envoy = traced
        for part in path.split("."):
            envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
        if site == "input":
            target = envoy.input
        else:  # nnsight mounts .output at .nns_output on modules that have an `output` child (BERT)
            target = envoy.nns_output if hasattr(twin.get_submodule(path), "output") else envoy.output
        target = target[tuple_index] if tuple_index is not None else target
        if head is None:
            target[:, position] = value
        else:
            target[:, position, head * len(value) : (head + 1) * len(value)] = value
        result = traced.output.logits.save()
    return result


def width_of(model, point: str) -> int:
    heads = model.config.num_attention_heads
    return model.config.hidden_size // heads if ".head:" in point else model.config.hidden_size


@pytest.mark.filterwarnings("ignore:Module .* has pre-defined a `output` attribute:UserWarning")  # nnsight on BERT
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_setting_a_value_matches_a_plain_hook_and_nnsight(family, point):
    sites = FAMILIES[family]
    model, _ = sites.build()
    generator = torch.Generator().manual_seed(1)
    value = torch.randn(width_of(model, point), generator=generator)
    with intervene(model, {point: value}, positions=2):
        ours = logits(model, sites.ids)
    handle = plain_hook(model, sites, point, lambda x: value.expand_as(x), [2])
    try:
        theirs = logits(model, sites.ids)
    finally:
        handle.remove()
    plain = logits(model, sites.ids)
    assert (ours - plain).abs().max() > 1e-3, "the edit changed nothing: the comparison would be empty"
    assert (ours - theirs).abs().max() <= TOL
    assert (ours - nnsight_patch(model, sites, point, value, 2)).abs().max() <= TOL


def _unit(d):
    return d / d.norm()


EDITS = {
    "function": (lambda d, ref: lambda x: torch.tanh(x) * 3, lambda d, ref: lambda x: torch.tanh(x) * 3),
    "ablate zero": (lambda d, ref: Ablate(), lambda d, ref: torch.zeros_like),
    "ablate direction": (
        lambda d, ref: Ablate(d),
        lambda d, ref: lambda x: x - (x @ _unit(d))[..., None] * _unit(d),
    ),
    "ablate mean": (
        lambda d, ref: Ablate(mode="mean", reference=ref),
        lambda d, ref: lambda x: ref.mean(0).expand_as(x),
    ),
    "ablate direction mean": (
        lambda d, ref: Ablate(d, mode="mean", reference=ref),
        lambda d, ref: lambda x: x - ((x @ _unit(d)) - (ref @ _unit(d)).mean())[..., None] * _unit(d),
    ),
    "clamp": (lambda d, ref: Clamp(d, -2.5), lambda d, ref: lambda x: x - ((x @ _unit(d)) + 2.5)[..., None] * _unit(d)),
    "add": (lambda d, ref: Add(d, 1.5), lambda d, ref: lambda x: x + 1.5 * d),
}


@pytest.mark.parametrize("positions", [None, [-1, 1], slice(2, 4)], ids=["all", "list", "slice"])
@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("point", ["layer:1.resid_pre", "layer:0.mlp_out", "layer:1.head:3"])
def test_each_edit_matches_a_plain_hook(edit, point, positions):
    sites = FAMILIES["llama"]
    model, _ = sites.build()
    generator = torch.Generator().manual_seed(2)
    width = width_of(model, point)
    direction = torch.randn(width, generator=generator)
    reference = torch.randn(7, width, generator=generator)
    ours_edit, their_edit = (make(direction, reference) for make in EDITS[edit])
    with intervene(model, {point: ours_edit}, positions=positions):
        ours = logits(model, sites.ids)
    handle = plain_hook(model, sites, point, their_edit, slice(None) if positions is None else positions)
    try:
        theirs = logits(model, sites.ids)
    finally:
        handle.remove()
    assert (ours - logits(model, sites.ids)).abs().max() > 1e-4
    assert (ours - theirs).abs().max() <= TOL


@pytest.mark.parametrize("family", list(FAMILIES))
def test_adding_a_direction_times_zero_is_bit_identical(family):
    sites = FAMILIES[family]
    model, _ = sites.build()
    direction = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(3))
    head = torch.randn(width_of(model, "layer:0.head:0"), generator=torch.Generator().manual_seed(4))
    plain = logits(model, sites.ids)
    with intervene(
        model, {"layer:0": Add(direction, 0.0), "layer:1.attn_out": Add(direction, 0), "layer:1.head:0": Add(head, 0.0)}
    ):
        assert torch.equal(logits(model, sites.ids), plain)
    with intervene(model, {"layer:0": Add(direction, 1e-3)}):
        assert not torch.equal(logits(model, sites.ids), plain)


def test_resid_mid_edits_the_residual_stream_not_only_the_mlp_input():
    """Llama's RMSNorm and bias-free MLP map 0 to 0, so a zeroed resid_mid leaves a zero block output."""
    model, _ = tiny_models.llama_lm()
    seen = []
    handle = model.model.layers[1].register_forward_hook(lambda mod, args, out: seen.append(out.clone()))
    try:
        with intervene(model, {"layer:1.resid_mid": Ablate()}):
            logits(model, IDS)
        logits(model, IDS)
    finally:
        handle.remove()
    assert torch.count_nonzero(seen[0]) == 0 and torch.count_nonzero(seen[1]) > 0


def test_resampling_draws_reference_rows_with_the_seed():
    sites = FAMILIES["llama"]
    model, tokenizer = sites.build()
    reference = reference_activations(model, tokenizer, ["The room was quiet.", "A long film."], "layer:1.resid_pre")
    seen, runs = [], []
    for seed in (0, 0, 1):
        with intervene(model, {"layer:1.resid_pre": Ablate(mode="resample", reference=reference, seed=seed)}):
            # registered after intervene's pre-hook, so it sees the edited input
            handle = _block(model, sites, 1).register_forward_pre_hook(
                lambda mod, args, kwargs: seen.append((args[0] if args else kwargs["hidden_states"]).clone()),
                with_kwargs=True,
            )
            try:
                runs.append(logits(model, sites.ids))
            finally:
                handle.remove()
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
    for row in seen[0][0]:  # every position now holds one of the reference rows
        assert (reference - row).abs().max(dim=1).values.min() == 0


def test_mean_ablation_from_texts_equals_one_from_reference_activations():
    sites = FAMILIES["gpt2"]
    model, tokenizer = sites.build()
    texts = ["The room was quiet.", "A long and dull film.", "Good."]
    rows = reference_activations(model, tokenizer, texts, "layer:0.head:1")
    # the rows are the head's slice of c_proj's input, captured here by a plain hook
    captured = []
    handle = model.transformer.h[0].attn.c_proj.register_forward_pre_hook(lambda m, args: captured.append(args[0]))
    try:
        for text in texts:
            logits(model, torch.tensor([tokenizer(text)["input_ids"]]))
    finally:
        handle.remove()
    expected = torch.cat([c[0, :, 16:32] for c in captured])
    assert rows.shape == expected.shape and (rows - expected).abs().max() <= TOL
    with intervene(model, {"layer:0.head:1": Ablate(mode="mean", reference=texts, tokenizer=tokenizer)}):
        from_texts = logits(model, sites.ids)
    with intervene(model, {"layer:0.head:1": Ablate(mode="mean", reference=rows)}):
        from_rows = logits(model, sites.ids)
    assert torch.equal(from_texts, from_rows)


def hook_state(model) -> list:
    return [
        {
            name: list((getattr(m, name, None) or {}).keys())
            for name in (
                "_forward_hooks",
                "_forward_pre_hooks",
                "_forward_hooks_with_kwargs",
                "_forward_pre_hooks_with_kwargs",
                "_backward_hooks",
                "_backward_pre_hooks",
            )
        }
        for m in model.modules()
    ]


class Boom(Exception):
    pass


@pytest.mark.parametrize("ending", ["normal", "exception", "ctrl-c", "error in a hook"])
@pytest.mark.parametrize("training", [False, True])
def test_the_model_is_untouched(ending, training):
    sites = FAMILIES["llama"]
    model, tokenizer = sites.build()
    model.train(training)
    try:
        before, hooks = model_fingerprint(model, tokenizer), hook_state(model)
        params = {name: p.detach().clone() for name, p in model.named_parameters()}
        edits = {"layer:0.head:1": Ablate(), "layer:1.resid_mid": Add(torch.ones(32), 2.0), 1: lambda x: x * 2}
        if ending == "error in a hook":
            edits["layer:0.mlp_out"] = Add(torch.ones(7), 1.0)
        raised = {"normal": None, "exception": Boom, "ctrl-c": KeyboardInterrupt, "error in a hook": ValueError}
        with pytest.raises(raised[ending]) if raised[ending] else _nothing():
            with intervene(model, edits) as points:
                assert sorted(points) == sorted(
                    ["layer:0.head:1", "layer:1.resid_mid", "layer:1"]
                    + (["layer:0.mlp_out"] if ending == "error in a hook" else [])
                )
                assert hook_state(model) != hooks
                logits(model, sites.ids)
                if ending in ("exception", "ctrl-c"):
                    raise raised[ending]()
        assert model_fingerprint(model, tokenizer) == before
        assert hook_state(model) == hooks
        assert model.training is training and all(m.training is training for m in model.modules())
        assert all(torch.equal(p, params[name]) for name, p in model.named_parameters())
    finally:
        model.eval()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_bad_input_names_the_fix():
    model, tokenizer = tiny_models.llama_lm()
    neox, _ = tiny_models.gpt_neox_lm()

    def run(edits, **options):
        with intervene(model, edits, **options):
            logits(model, IDS)

    with pytest.raises(ValueError, match=r"direction has width 7 but layer:1 has width 32; use a direction of the"):
        run({"layer:1": Add(torch.ones(7), 1.0)})
    with pytest.raises(ValueError, match=r"direction has width 32 but layer:1.head:0 has width 8"):
        run({"layer:1.head:0": Clamp(torch.ones(32), 1.0)})
    with pytest.raises(
        ValueError, match=r"head 4 does not exist: .* 4 attention heads; use layer:1.head:0 .. layer:1.head:3"
    ):
        run({"layer:1.head:4": Ablate()})
    with pytest.raises(
        UnsupportedModelError, match=r"no resid_mid point .* use 'layer:0.resid_pre', 'layer:0.attn_out'"
    ):
        with intervene(neox, {"layer:0.resid_mid": Ablate()}):
            pass
    with pytest.raises(
        ValueError, match=r"unknown layer 'layer:0.resid_middle'.*An attention head is 'layer:<block>.head:<head>'"
    ):
        run({"layer:0.resid_middle": Ablate()})
    with pytest.raises(ValueError, match=r"layer index 5 is out of range; this model has 2 blocks"):
        run({"layer:5.head:0": Ablate()})
    with pytest.raises(ValueError, match=r"shape \(3, 32\), which does not broadcast .* \(1, 6, 32\)"):
        run({"layer:0": torch.zeros(3, 32)})
    with pytest.raises(ValueError, match=r"position 6 is out of range at layer:0: this forward pass has 6 tokens"):
        run({"layer:0": Ablate()}, positions=[0, 6])
    with pytest.raises(TypeError, match=r"positions must be None \(every token\), a token index"):
        run({"layer:0": Ablate()}, positions="last")
    with pytest.raises(ValueError, match=r"returned \(1, 6\), but it must return a tensor of the shape it was given"):
        run({"layer:0": lambda x: x.sum(-1)})
    with pytest.raises(TypeError, match=r"the edit at layer:0 is a str; use a tensor to set, a function"):
        run({"layer:0": "zero"})
    with pytest.raises(TypeError, match=r"edits must be a dict \{point: edit\}"):
        run([("layer:0", Ablate())])
    with pytest.raises(ValueError, match=r"needs reference activations: pass reference="):
        Ablate(mode="resample")
    with pytest.raises(ValueError, match=r"reference texts but no tokenizer; pass tokenizer="):
        Ablate(mode="mean", reference=["Some text."])
    with pytest.raises(ValueError, match=r"takes no reference"):
        Ablate(mode="zero", reference=torch.zeros(2, 32))
    with pytest.raises(ValueError, match=r"unknown mode 'median'"):
        Ablate(mode="median")
    with pytest.raises(ValueError, match=r"must be finite and non-zero"):
        Clamp(torch.zeros(32), 1.0)
    with pytest.raises(ValueError, match=r"one real vector \(1-D"):
        Add(torch.zeros(2, 32), 1.0)
    with pytest.raises(ValueError, match=r"reference has width 16 but layer:0 has width 32"):
        run({"layer:0": Ablate(mode="mean", reference=torch.zeros(4, 16))})


@pytest.mark.parametrize("point", POINTS)
def test_gradients_flow_through_an_edit_as_through_a_plain_hook(point):
    """Attribution patching differentiates through edits: the gradient of the logits with respect to a set value
    (and to the input embeddings, through the rest of the stream) equals that of the plain hook."""
    sites = FAMILIES["llama"]
    model, _ = sites.build()
    grads = []
    for ours in (True, False):
        value = torch.randn(width_of(model, point), generator=torch.Generator().manual_seed(6)).requires_grad_()
        embeds = model.get_input_embeddings()(sites.ids).detach().requires_grad_()
        if ours:
            with intervene(model, {point: lambda x: x * value}, positions=[1, 3]):
                model(inputs_embeds=embeds).logits.pow(2).sum().backward()
        else:
            handle = plain_hook(model, sites, point, lambda x: x * value, [1, 3])
            try:
                model(inputs_embeds=embeds).logits.pow(2).sum().backward()
            finally:
                handle.remove()
        grads.append((value.grad, embeds.grad))
        model.zero_grad(set_to_none=True)  # the shared tiny model keeps no gradients
    assert grads[0][0].abs().max() > 0
    for mine, theirs in zip(*grads):
        assert (mine - theirs).abs().max() <= 1e-4 * max(1.0, float(theirs.abs().max()))


def test_a_set_value_that_requires_grad_gets_its_gradient():
    model, _ = tiny_models.llama_lm()
    value = torch.zeros(32, requires_grad=True)
    with intervene(model, {"layer:0": value}, positions=2):
        model(input_ids=IDS).logits.pow(2).sum().backward()
    model.zero_grad(set_to_none=True)
    assert value.grad is not None and value.grad.abs().max() > 0


HEAD_FAMILIES = {
    "llama": (tiny_models.llama_lm, "model.layers.1.self_attn.o_proj"),
    "qwen3": (tiny_models.qwen3_lm, "model.layers.1.self_attn.o_proj"),
    "gemma2": (tiny_models.gemma2_lm, "model.layers.1.self_attn.o_proj"),
    "phi3": (tiny_models.phi3_lm, "model.layers.1.self_attn.o_proj"),
    "gpt_neox": (tiny_models.gpt_neox_lm, "gpt_neox.layers.1.attention.dense"),
    "roberta": (tiny_models.roberta_classifier, "roberta.encoder.layer.1.attention.output.dense"),
    "deberta_v2": (tiny_models.deberta_v2_classifier, "deberta.encoder.layer.1.attention.output.dense"),
    "modernbert": (tiny_models.modernbert_classifier, "model.layers.1.attn.Wo"),
}


@pytest.mark.parametrize("family", list(HEAD_FAMILIES))
def test_the_last_head_is_the_last_slice_of_the_output_projections_input(family):
    build, out_proj = HEAD_FAMILIES[family]
    model, tokenizer = build()
    ids = torch.tensor([tokenizer("The room was quiet and")["input_ids"]])
    last = model.config.num_attention_heads - 1

    def run():
        with torch.no_grad():
            return model(input_ids=ids).logits

    with intervene(model, {f"layer:1.head:{last}": Ablate()}) as points:
        ours = run()
    assert list(points) == [f"layer:1.head:{last}"]
    module = model.get_submodule(out_proj)
    heads = model.config.num_attention_heads

    def zero_last(mod, args):
        x = args[0].clone()
        x[..., -x.shape[-1] // heads :] = 0
        return (x, *args[1:])

    handle = module.register_forward_pre_hook(zero_last)
    try:
        theirs = run()
    finally:
        handle.remove()
    assert (ours - run()).abs().max() > 1e-4
    assert (ours - theirs).abs().max() <= TOL
