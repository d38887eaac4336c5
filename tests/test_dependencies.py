"""Every dependency pyproject.toml declares is used by the project (imported, or named as a Hydra
launcher), so an install pulls nothing the benchmark does not run."""

import re

import tomllib

from ai4ai import PROJECT_ROOT

# distribution -> what using it looks like in the source
USES = {
    "torch": r"^\s*(import|from) torch\b",
    "transformers": r"^\s*from transformers\b",
    "peft": r"^\s*from peft import\b",
    "accelerate": r"^\s*from accelerate import\b",
    "datasets": r"^\s*import datasets\b",
    "pyarrow": r"^\s*import pyarrow\b",
    "triton": r"^\s*(import|from) triton\b",
    "hydra-core": r"^\s*(import|from) hydra\b",
    "hydra-submitit-launcher": r"^\s*- submitit_(local|slurm)\b",  # conf/hydra/launcher/*.yaml
    "safetensors": r"^\s*from safetensors\b",
    "numpy": r"^\s*import numpy\b",
    "pyyaml": r"^\s*import yaml\b",
    "tqdm": r"^\s*from tqdm\b",
    "psutil": r"^\s*import psutil\b",
    "scikit-learn": r"\bsklearn\b",
    "matplotlib": r"^\s*(import|from) matplotlib\b",
}


def _declared() -> list[str]:
    deps = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [re.split(r"[<>=!~\[ ]", d, maxsplit=1)[0].lower() for d in deps]


def test_every_declared_dependency_is_used():
    text = "\n".join(
        p.read_text(errors="replace")
        for folder in ("ai4ai", "ai4ai_kernels", "repos_frozen", "grader_hidden", "conf")
        for p in (PROJECT_ROOT / folder).rglob("*")
        if p.suffix in (".py", ".yaml") and p.is_file()
    )
    unknown = [d for d in _declared() if d not in USES]
    assert not unknown, f"add how {unknown} is used to USES, or drop it from pyproject.toml"
    unused = [d for d in _declared() if not re.search(USES[d], text, re.M)]
    assert not unused, f"declared in pyproject.toml but used nowhere: {unused}"


def test_no_folder_of_the_checkout_shadows_an_installed_module():
    """The repository root is on sys.path under pytest and `python -m ai4ai.run`: a top-level folder
    named like an installed package's module (the kernels folder once shadowed the `kernels`
    package that transformers 5.25 imports) breaks every import of that package from here."""
    import importlib.metadata

    owners = importlib.metadata.packages_distributions()
    clashes = {
        p.name: owners[p.name]
        for p in PROJECT_ROOT.iterdir()
        if p.is_dir() and p.name in owners and set(owners[p.name]) != {"ai4ai"}
    }
    assert not clashes, f"rename these folders, they shadow installed modules: {clashes}"
    assert "kernels" not in {p.name for p in PROJECT_ROOT.iterdir()}


def test_the_cache_goes_under_the_installed_transformers_name():
    """The repos' and graders' greedy decoders pass the key/value cache as `cache_kwarg()`: the
    installed transformers' own GPT-2 takes it there without a deprecation warning, returns it in the
    same field, and a cached step gives the logits of a full forward of the sequence."""
    import warnings

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from ai4ai.repo.models import cache_kwarg

    name = cache_kwarg()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=11,
            n_positions=8,
            n_embd=16,
            n_layer=2,
            n_head=2,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
    ).eval()
    seq = torch.tensor([[1, 4, 2, 7]])
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        res = model(input_ids=seq[:, :3], use_cache=True)
        step = model(input_ids=seq[:, 3:], use_cache=True, **{name: getattr(res, name)})
        full = model(input_ids=seq)
    assert getattr(step, name) is not None
    assert torch.allclose(step.logits[:, -1], full.logits[:, -1], atol=1e-5)
