# SPDX-License-Identifier: MIT
"""A real client of the loader, not our own writer: a small Llama and a
small Qwen2, built by transformers from a config (random weights) and saved
with save_pretrained into several shards, are loaded with svmbatch into a
model created on the meta device, as a serving engine loads one.  Its
logits must be bit for bit those of the model that from_pretrained loads.

Three ways into the model:

  state_dict   load_safetensors, then load_state_dict(sd, strict=True,
               assign=True): the parameters become the loader's tensors.
  iter_assign  iter_safetensors, each tensor made its module's parameter as
               it comes (what accelerate's set_module_tensor_to_device does).
  iter_copy    iter_safetensors into parameters allocated beforehand with
               to_empty(), copied one by one (a vLLM load_weights()).

Torch before 2.1 (Debian 12's 1.13) has no assign=: there the state_dict
way allocates the model with to_empty() and load_state_dict copies into it,
as it did before assign= existed (iter_assign still takes the loader's
tensors without a copy).  Torch before 2.0 has no `with torch.device(...)`
either: MetaFactories is the TorchFunctionMode that torch 2.0's is.

It runs with Debian's torch 1.13 and transformers 4.49.0 (requirements.txt:
the newest that runs with it), with PyPI's torch 2.11 and transformers
5.17 (requirements-torch2.txt, make check's second run) and on the GPU
machine with its venv's: where their APIs differ the test looks at the
API, not at a version number."""

import copy
import inspect
import itertools
import json
import os
import re

import pytest

import torch  # required: an import failure is a collection error

# The checkpoints are local directories: nothing here may reach the hub
# (huggingface_hub reads this when transformers imports it).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Required too, never a skip: tools/python-deps.sh installs the release of
# requirements.txt (Debian's torch) or requirements-torch2.txt (the
# venv's) that runs with that torch, so an import error, a release that
# disables this torch or a model that cannot be imported is a collection
# error, the suite's failure.
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.utils import is_torch_available  # noqa: E402

import svmbatch.torch as sbt  # noqa: E402
from conftest import has_cuda, needs_cuda  # noqa: E402

if not is_torch_available():
    raise ImportError(f"transformers {transformers.__version__} disables torch "
                      f"{torch.__version__}: tools/python-deps.sh pins the wrong release")
# Models are imported lazily: a release that cannot run with this torch
# fails here, at collection, with its error.
for _model in ("LlamaForCausalLM", "Qwen2ForCausalLM"):
    getattr(transformers, _model)

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
INDEX = "model.safetensors.index.json"
# load_state_dict(assign=True) came with torch 2.1.
ASSIGN = "assign" in inspect.signature(torch.nn.Module.load_state_dict).parameters
SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
# 360 to 430 kB of float32: shards of at most 100 kB make four or five.
SHARD_BYTES = 100_000


def dtype_kwarg():
    """The name of from_pretrained's and from_config's dtype: `dtype`
    since transformers 4.56, `torch_dtype` before it (5 still takes that,
    with a warning)."""
    doc = transformers.PreTrainedModel.from_pretrained.__doc__ or ""
    return "dtype" if re.search(r"^\s*dtype \(", doc, re.M) else "torch_dtype"


def config_of(arch, tied):
    if arch == "llama":
        return transformers.LlamaConfig(tie_word_embeddings=tied, **SMALL)
    # No sliding window (off by default, but 4.49 warns of its size).
    return transformers.Qwen2Config(tie_word_embeddings=tied, sliding_window=None, **SMALL)


def tensors_of(model):
    return itertools.chain(model.named_parameters(), model.named_buffers())


class MetaFactories(torch.overrides.TorchFunctionMode):
    """`with torch.device("meta")` for torch 1.13: the factory functions
    that a module's constructor calls (torch.empty, ones, arange...) make
    meta tensors unless given a device (torch.utils._device.DeviceContext
    of torch 2.0 does the same)."""

    FACTORIES = {torch.empty, torch.empty_strided, torch.zeros, torch.ones, torch.full,
                 torch.arange, torch.linspace, torch.logspace, torch.eye, torch.rand,
                 torch.randn, torch.randint, torch.randperm, torch.tensor}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self.FACTORIES and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def on_meta():
    return torch.device("meta") if hasattr(torch.device, "__enter__") else MetaFactories()


class Checkpoint:
    """A model of transformers saved by save_pretrained in shards, and the
    reference: the model that from_pretrained loads from it, with its logits
    for the same input on each device (computed here, before a test's
    baseline, so that CUDA's start is no leak of the test)."""

    def __init__(self, arch, tied, directory):
        self.arch, self.tied, self.dir = arch, tied, str(directory)
        self.dtype = {dtype_kwarg(): torch.float32}
        torch.manual_seed(0)
        writer = AutoModelForCausalLM.from_config(config_of(arch, tied), **self.dtype)
        with torch.no_grad():  # the norms too, which start as ones
            for p in writer.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        writer.save_pretrained(self.dir, max_shard_size=SHARD_BYTES)
        with open(os.path.join(self.dir, INDEX)) as f:
            self.weight_map = json.load(f)["weight_map"]
        self.names = set(self.weight_map)
        self.ids = torch.randint(0, SMALL["vocab_size"], (2, 16),
                                 generator=torch.Generator().manual_seed(1))
        self.reference = AutoModelForCausalLM.from_pretrained(
            self.dir, attn_implementation="eager", **self.dtype).eval()
        assert self.reference.config._attn_implementation == "eager"
        assert {t.dtype for _, t in tensors_of(self.reference)} == {torch.float32}
        self.state = self.reference.state_dict()
        self.buffers = dict(self.reference.named_buffers())
        self.logits = {"cpu": logits(self.reference, self.ids, "cpu")}
        if has_cuda():
            on_gpu = copy.deepcopy(self.reference).to("cuda")
            self.logits["cuda"] = logits(on_gpu, self.ids, "cuda")


def logits(model, ids, device):
    with torch.no_grad():
        return model(ids.to(device)).logits


@pytest.fixture(scope="module", params=[("llama", True), ("llama", False), ("qwen2", True),
                                        ("qwen2", False)],
                ids=["llama-tied", "llama", "qwen2-tied", "qwen2"])
def checkpoint(request, tmp_path_factory):
    arch, tied = request.param
    return Checkpoint(arch, tied, tmp_path_factory.mktemp(f"{arch}-tied-{tied}"))


def meta_model(ckpt):
    """The model of ckpt's config.json with every tensor on the meta device."""
    config = AutoConfig.from_pretrained(ckpt.dir)
    with on_meta():
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                 **ckpt.dtype)
    assert all(t.is_meta for _, t in tensors_of(model))
    return model.eval()


def tied_aliases(model, present):
    """The names of the model's state dict that are one parameter with a
    name the checkpoint has (tied embeddings: save_pretrained writes it
    once), as {name absent: name present}."""
    groups = {}
    for name, t in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(t), []).append(name)
    aliases = {}
    for names in groups.values():
        have = [n for n in names if n in present]
        aliases.update({n: have[0] for n in names if have and n not in present})
    return aliases


def poison(model):
    """NaN in every parameter that to_empty() allocated: one that the load
    misses shows in the logits instead of passing on zeroed memory."""
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))


def rebuild_computed_buffers(model, device):
    """Non-persistent buffers are in no checkpoint: transformers computes
    them when it builds their module (RoPE's inv_freq), which on the meta
    device computed nothing.  Each module that owns one is built again from
    its config, on the CPU as from_pretrained does, and moved to device."""
    persistent = set(model.state_dict())
    owners = {n.rpartition(".")[0] for n, _ in model.named_buffers() if n not in persistent}
    assert owners, "a model of transformers without RoPE's inv_freq?"
    for name in owners:
        module = model.get_submodule(name)
        assert not list(module.parameters()), f"{name} has parameters: not rebuilt"
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent), leaf, type(module)(config=module.config).to(device))


def load_state_dict_way(model, ckpt, device):
    """load_safetensors, then load_state_dict(strict=True) with the tied
    names pointing at the tensor the checkpoint has.  Returns the loaded
    tensors' addresses when the model must now hold them (assign=True)."""
    sd = sbt.load_safetensors(ckpt.dir, device)
    assert set(sd) == ckpt.names
    aliases = tied_aliases(model, sd)
    assert aliases == ({"lm_head.weight": "model.embed_tokens.weight"} if ckpt.tied else {})
    for alias, name in aliases.items():
        sd[alias] = sd[name]
    if ASSIGN:
        model.load_state_dict(sd, strict=True, assign=True)
    else:
        model.to_empty(device=device)
        poison(model)
        model.load_state_dict(sd, strict=True)
    # assign= (to_empty() too) left two parameters of the tied pair: one again.
    model.tie_weights()
    return {n: t.data_ptr() for n, t in sd.items()} if ASSIGN else None


def iter_assign_way(model, ckpt, device):
    """Each tensor of iter_safetensors made the parameter it names."""
    addresses = {}
    for name, t in sbt.iter_safetensors(ckpt.dir, device):
        parent, _, leaf = name.rpartition(".")
        module = model.get_submodule(parent)
        old = getattr(module, leaf)
        assert old.is_meta and old.shape == t.shape and old.dtype == t.dtype, name
        setattr(module, leaf, torch.nn.Parameter(t, requires_grad=old.requires_grad))
        addresses[name] = t.data_ptr()
    assert set(addresses) == ckpt.names
    model.tie_weights()  # the tied name still holds the meta parameter
    return addresses


def iter_copy_way(model, ckpt, device):
    """A vLLM load_weights(): the model allocated (to_empty, whose copies
    untie the tied pair: tie_weights ties it again), then each tensor of
    iter_safetensors copied into its parameter."""
    model.to_empty(device=device)
    model.tie_weights()
    poison(model)
    params = dict(model.named_parameters())
    assert set(params) == ckpt.names
    seen = set()
    with torch.no_grad():
        for name, t in sbt.iter_safetensors(ckpt.dir, device):
            params[name].copy_(t)
            seen.add(name)
    assert seen == set(params)
    return None


WAYS = {"state_dict": load_state_dict_way, "iter_assign": iter_assign_way,
        "iter_copy": iter_copy_way}


def test_save_pretrained_wrote_shards_and_an_index(checkpoint):
    files = sorted(f for f in os.listdir(checkpoint.dir) if f.endswith(".safetensors"))
    assert len(files) >= 3, files
    assert all(re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f) for f in files), files
    assert sorted(set(checkpoint.weight_map.values())) == files
    # Tied embeddings are written once: the checkpoint lacks lm_head.weight.
    assert ("lm_head.weight" in checkpoint.names) is not checkpoint.tied
    assert checkpoint.names == set(checkpoint.state) - ({"lm_head.weight"} if checkpoint.tied
                                                        else set())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("way", list(WAYS))
def test_a_meta_model_loaded_by_svmbatch_gives_from_pretrained_logits(checkpoint, baseline,
                                                                     way, device):
    model = meta_model(checkpoint)
    addresses = WAYS[way](model, checkpoint, device)
    rebuild_computed_buffers(model, device)

    placed = {n: t.device.type for n, t in tensors_of(model)}
    assert set(placed.values()) == {device}, placed
    if checkpoint.tied:
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    else:
        assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    if addresses is not None:  # the model holds the loader's tensors, no copy
        assert {n: model.get_parameter(n).data_ptr() for n in checkpoint.names} == \
            {n: addresses[n] for n in checkpoint.names}
    got = model.state_dict()
    assert set(got) == set(checkpoint.state)
    for name, want in checkpoint.state.items():
        assert torch.equal(got[name].cpu(), want), name
    buffers = dict(model.named_buffers())
    assert set(buffers) == set(checkpoint.buffers)
    for name, want in checkpoint.buffers.items():
        assert torch.equal(buffers[name].cpu(), want), name
    assert model.config._attn_implementation == "eager"
    assert torch.equal(logits(model, checkpoint.ids, device), checkpoint.logits[device])


@pytest.mark.parametrize("device", DEVICES)
def test_names_load_only_those_tensors(checkpoint, baseline, device):
    def layer0(name):
        return name.startswith("model.layers.0.")

    got = sbt.load_safetensors(checkpoint.dir, device, names=layer0)
    assert set(got) == {n for n in checkpoint.names if layer0(n)}
    some = ["model.norm.weight", "model.embed_tokens.weight", "model.layers.1.mlp.up_proj.weight"]
    got.update(sbt.iter_safetensors(checkpoint.dir, device, names=some))
    assert set(got) == {n for n in checkpoint.names if layer0(n)} | set(some)
    for name, t in got.items():
        assert t.device.type == device and torch.equal(t.cpu(), checkpoint.state[name]), name
