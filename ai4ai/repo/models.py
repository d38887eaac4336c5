"""Bring your own model: `task.model_path=/path/to/hf-model` trains a Hugging Face causal LM of yours
instead of the repo's prepared model.

    python -m ai4ai.grade task=sft task.model_path=/models/qwen2.5-0.5b scale=full

`with_model(task)` is the whole of it for the harness: it checks the folder (one clear line, a
ModelPathError, before anything starts), then makes a *derived repo*, a copy of the frozen repo
plus a `byom/` folder, once per (frozen repo, model content), under outputs/.cache/own_models/,
and returns the task with `repo` pointing at it. Everything downstream (pristine copy, agent
workspace, training copy, strict loader, hidden evaluation, task version, anchors) then works on
the derived repo as it does on the frozen one. `byom/` holds:

    model/         the model's config and tokenizer (save_pretrained), no weights
    vocab.json     the model's token id for each of the task's tokens (the encoding rule below)
    base.safetensors (and whatever else the family's prepare step makes), SHA256SUMS
    MODEL.md       what the model is: architecture, parameter count, vocabulary, source, sha256

Encoding rule: the task's text is encoded with the model's tokenizer one character at a time
(distillation's digits and codes, pruning's 32 symbols written as base-32 digits 0-9A-V,
unlearning's newline, space and letters a-z). Every character of the task's alphabet must be a
single token of the vocabulary of its own (`tokenizer(c)` gives one id, which decodes back to
`c`), so problems stay token-aligned as in the repo's own vocabulary; <eos> is the tokenizer's
end-of-sequence token, <bos> its beginning-of-sequence token (its <eos> when it has none), and
<pad> its pad token when that is a token of its own, else its unknown token, else the lowest id
no other task token uses. A task symbol that is no character and no special, written `<...>`
in the repo's SYMBOLS (unlearning's <unknown>, its 64 <name i>, 64 <value i> and 2,000
<entity i> symbols: they stand for nothing a text could spell), takes a token of the vocabulary
of its own by position: in the task's order, the lowest ids of the tokenizer's vocabulary (below
the embedding's rows) that are none of the tokenizer's special or added tokens and no id another
task token uses; a vocabulary with fewer such ids than those symbols cannot encode the task (one
line says how many it has and how many the task needs). The committed splits keep the task's
ids and the repo maps them through vocab.json when it loads them.
The family's prepare step (`python prepare.py --own-model PATH` in the derived repo, with `--data DIR`
where the task's prepare step reads the hidden grader's data: unlearning's facts, written beside
the derived repo and removed once it is done) makes the base weights; see each repo's README
("Your own model") for what it does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from ai4ai.core.console import say
from ai4ai.core.hidden import load_grader
from ai4ai.core.layout import file_lock
from ai4ai.core.provenance import model_sha256, python_executable, tree_sha256
from ai4ai.core.task import Task, TaskError
from ai4ai.repo.registry import CACHE_ROOT, register
from ai4ai.repo.workspace import copy_repo, make_writable

# The tasks that start from a prepared LM and take task.model_path, in the order they gained it.
OWN_MODEL_TASKS = ("sft", "dpo", "reward_model", "distillation", "pruning", "unlearning")
# The tasks whose prepare step on your model trains long (unlearning's memorisation, 20,000 steps): it runs on
# the GPU when this machine has one (the others run on the CPU, one thread). Once made, the derived repo is
# fixed: its byom/ weights are part of the task version.
ON_DEVICE = ("unlearning",)
# The tasks whose repo-prepared artifacts (task config data.artifacts) are still used beside your model:
# distillation's teacher. For the others they are the prepared model yours replaces, so the derived
# task has no artifacts step: `python -m ai4ai.prepare ... task.model_path=PATH` and the dry run do not
# ask for the repo's own model, which training on yours never loads.
KEEP_REPO_ARTIFACTS = ("distillation",)
# The repos whose shipped recipe can train a LoRA adapter (peft) on your model instead of every weight
# (task.adapter=lora; auto picks it above LORA_FROM_PARAMS or where full fine-tuning would not fit the
# GPU): the derived repo carries the choice in byom/adapter.json, so its version and anchors are the
# adapter's. The protected checkpoint writer merges the adapter (merge_and_unload) into each checkpoint,
# so the grader loads the model's own weights as for any other run.
ADAPTER_TASKS = ("sft", "dpo", "reward_model", "distillation", "unlearning")
LORA_FROM_PARAMS = 1_000_000_000
# bytes a parameter costs when every weight trains with AdamW in fp32 (weight, gradient, two moments)
FULL_FINETUNE_BYTES = 16
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
SPECIALS = ("<pad>", "<bos>", "<eos>")
PREPARE_TIMEOUT_S = 6 * 3600
# The parameters of the model the repo builds (the strict loader's and the patch filter's basis), on
# the meta device: no memory, no init.
COUNT = (
    "import torch\nwith torch.device('meta'):\n    from model import build_model\n    m = build_model('ci')\n"
    "print(sum(p.numel() for p in m.parameters()))"
)


class ModelPathError(TaskError):
    """task.model_path cannot be used; the message is one line that says what the folder lacks."""

    def __init__(self, path, msg: str):
        super().__init__(f"task.model_path={path}: {' '.join(str(msg).split())}")


@dataclass(frozen=True)
class ModelInfo:
    path: str
    sha256: str
    architecture: str  # e.g. LlamaForCausalLM
    model_type: str  # e.g. llama
    n_params: int  # parameters as the repo builds the model (tied tensors once)
    vocab_size: int  # rows of the input embedding
    tokenizer_size: int
    token_ids: list  # task token i -> model token id
    symbols: list  # task token i: a special name, one character or a `<...>` symbol
    n_layers: int | None
    hidden_size: int | None


def cache_kwarg() -> str:
    """The name of the key/value cache in this transformers (forward's argument and the output's field):
    `cache` from 5.24, `past_key_values` before; later 5.x accept the older name until 5.40 drops it.
    The graders' greedy decoders pass and read the cache under it (`model(..., **{name: cache})`)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def _quiet() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def repo_vocabulary(task: Task) -> tuple[list, int]:
    """(SYMBOLS, SEQ_LEN) of the frozen repo's config.py, read from the file (the frozen repo has no
    byom/, so this is the repo's own vocabulary)."""
    spec = importlib.util.spec_from_file_location(f"ai4ai_own_model_cfg_{task.name}", task.repo / "config.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if getattr(mod, "SYMBOLS", None) is None:
        raise ModelPathError(
            task.model_path, f"task {task.name} does not take task.model_path (its config.py has no SYMBOLS)"
        )
    return list(mod.SYMBOLS), int(mod.SEQ_LEN)


def is_opaque(symbol: str) -> bool:
    """A task symbol that stands for no text (`<name 7>`): it takes a free token by position (the rule above)."""
    return len(symbol) > 2 and symbol.startswith("<") and symbol.endswith(">") and symbol not in SPECIALS


def free_ids(tokenizer, vocab_size: int, taken: set) -> list:
    """The ids the encoding rule gives the task's `<...>` symbols, lowest first: the tokenizer's vocabulary
    below `vocab_size`, less its special and added tokens and the ids in `taken`."""
    special = set(tokenizer.all_special_ids) | {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})}
    return sorted(
        i for i in set(tokenizer.get_vocab().values()) if i < vocab_size and i not in special and i not in taken
    )


def token_ids(tokenizer, symbols: list, vocab_size: int, where) -> list:
    """The model's id of each task token by the encoding rule (module docstring), or ModelPathError."""
    eos = tokenizer.eos_token_id
    if eos is None and any(s in SPECIALS for s in symbols):  # a task of bare symbols (pruning) needs none
        raise ModelPathError(
            where, "its tokenizer has no end-of-sequence token (eos_token), which ends every answer of the task"
        )
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
    ids: dict = {}
    bad = []
    for i, s in enumerate(symbols):
        if s in SPECIALS or is_opaque(s):
            continue
        enc = tokenizer(s, add_special_tokens=False)["input_ids"]
        dec = tokenizer.decode(enc, clean_up_tokenization_spaces=False) if len(enc) == 1 else None
        if len(enc) != 1 or not (dec == s or (s.strip() and dec.strip() == s)) or enc[0] >= vocab_size:
            bad.append(s)
        else:
            ids[i] = int(enc[0])
    if bad:
        shown = " ".join(repr(c) for c in bad[:12]) + (f" and {len(bad) - 12} more" if len(bad) > 12 else "")
        raise ModelPathError(
            where,
            f"its vocabulary cannot encode the task's characters {shown} (each must be a "
            f"single token of its own, one that decodes back to the character)",
        )
    used = set(ids.values())
    clash = sorted({s for i, s in enumerate(symbols) if i in ids and ids[i] in (bos, eos)})
    if len(used) != len(ids) or clash:
        raise ModelPathError(
            where,
            "its tokenizer gives two task characters (or a character and <bos>/<eos>) "
            f"the same token{' (' + ' '.join(map(repr, clash)) + ')' if clash else ''}",
        )
    taken = used | ({bos, eos} - {None})
    opaque = [i for i, s in enumerate(symbols) if is_opaque(s)]
    if opaque:
        free = free_ids(tokenizer, vocab_size, taken)
        if len(free) < len(opaque):
            raise ModelPathError(
                where,
                f"its vocabulary is too small for the task: {len(opaque):,} of the task's "
                f"{len(symbols):,} symbols are no characters and each needs a token of its own, "
                f"and it has {len(free):,} free (ids below {vocab_size:,} that are no special or "
                f'added token and not one of the task\'s characters; README, "Your own model")',
            )
        ids.update(zip(opaque, free))
        taken |= set(free[: len(opaque)])
    if not any(s in SPECIALS for s in symbols):
        return [ids[i] for i in range(len(symbols))]
    pad = next(
        (
            t
            for t in (tokenizer.pad_token_id, tokenizer.unk_token_id)
            if t is not None and t not in taken and t < vocab_size
        ),
        None,
    )
    if pad is None:
        pad = next(t for t in range(vocab_size) if t not in taken)
    special = {"<pad>": pad, "<bos>": bos, "<eos>": eos}
    return [special[s] if s in SPECIALS else ids[i] for i, s in enumerate(symbols)]


def check_model_path(task: Task) -> ModelInfo:
    """Check task.model_path before anything starts; raises ModelPathError (one line) when the folder
    is missing or unreadable, has no config, weights or tokenizer, is not a causal LM transformers can
    build, or its vocabulary cannot encode the task's characters."""
    where = task.model_path
    if task.name not in OWN_MODEL_TASKS:
        raise ModelPathError(
            where, f"task {task.name} does not take task.model_path; tasks that do: {', '.join(OWN_MODEL_TASKS)}"
        )
    expected = (
        "expected a Hugging Face model folder as save_pretrained writes it: config.json, the weights "
        "(model.safetensors) and the tokenizer's files (tokenizer.json); nothing is ever downloaded"
    )
    root = Path(os.path.expanduser(str(where)))
    if not root.is_dir():
        raise ModelPathError(where, f"no such folder; {expected}")
    try:
        names = set(os.listdir(root))
    except OSError as e:
        raise ModelPathError(where, f"cannot read the folder ({e.strerror}); {expected}")
    if "config.json" not in names:
        raise ModelPathError(where, f"no config.json; {expected}")
    if not names & set(WEIGHT_FILES):
        raise ModelPathError(where, f"no weights ({' or '.join(WEIGHT_FILES[:3])}); {expected}")
    if not names & set(TOKENIZER_FILES):
        raise ModelPathError(
            where,
            "no tokenizer in the folder (tokenizer.json or tokenizer_config.json with "
            "its vocabulary files, as tokenizer.save_pretrained writes them): the task's "
            "data is encoded with the model's own tokenizer",
        )
    _quiet()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        cfg = AutoConfig.from_pretrained(root, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises, the folder is the cause
        raise ModelPathError(where, f"config.json does not load ({type(e).__name__}: {e})")
    try:
        tok = AutoTokenizer.from_pretrained(root, local_files_only=True)
    except Exception as e:  # noqa: BLE001
        raise ModelPathError(where, f"its tokenizer does not load ({type(e).__name__}: {str(e)[:200]})")
    try:
        with torch.device("meta"):
            meta = AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # noqa: BLE001
        raise ModelPathError(where, f"not a causal LM that transformers builds ({type(e).__name__}: {str(e)[:200]})")
    vocab_size = int(meta.get_input_embeddings().weight.shape[0])
    symbols, seq_len = repo_vocabulary(task)
    ids = token_ids(tok, symbols, vocab_size, where)
    positions = getattr(cfg, "max_position_embeddings", None)
    if positions is not None and int(positions) < seq_len:
        raise ModelPathError(where, f"it takes {positions} positions; the task's sequences are {seq_len} tokens")
    return ModelInfo(
        path=str(root.resolve()),
        sha256=model_sha256(root),
        architecture=(getattr(cfg, "architectures", None) or [type(meta).__name__])[0],
        model_type=str(cfg.model_type),
        n_params=sum(p.numel() for p in meta.parameters()),
        vocab_size=vocab_size,
        tokenizer_size=len(tok),
        token_ids=ids,
        symbols=symbols,
        n_layers=getattr(cfg, "num_hidden_layers", None),
        hidden_size=getattr(cfg, "hidden_size", None),
    )


def describe(info: ModelInfo) -> str:
    """The README section of a derived repo: what model this task trains."""
    shown = ", ".join(f"{s!r} -> {i}" for s, i in list(zip(info.symbols, info.token_ids))[:8])
    opaque = [(s, i) for s, i in zip(info.symbols, info.token_ids) if is_opaque(s)]
    named = (
        ""
        if not opaque
        else (
            f"\n  the task's {len(opaque):,} symbols that are no characters ({opaque[0][0]} ... {opaque[-1][0]}) take the "
            f"lowest free ids of the vocabulary in order, ids {min(i for _, i in opaque)} to {max(i for _, i in opaque)} "
            f'(no special or added token, no task character\'s id; README, "Your own model")'
        )
    )
    return f"""
## This copy: your own model

This copy of the task trains **your own model** (`task.model_path`), not the repo's GPT-2; the
files below `byom/` describe it and `model.build_model` builds it from `byom/model/config.json`.

- architecture: `{info.architecture}` (model type `{info.model_type}`), {info.n_layers} layers, hidden size {info.hidden_size}
- parameters: {info.n_params:,} (as the repo builds it, tied tensors once), trained in fp32
- vocabulary: {info.vocab_size:,} embedding rows, tokenizer of {info.tokenizer_size:,} tokens; the task's text is
  encoded with it one character at a time (each task character is one token of its own):
  {shown}, ... (all {len(info.token_ids)} in `byom/vocab.json`, `config.TOKEN_IDS`){named}
- source: `{info.path}`, content sha256 `{info.sha256[:16]}`
"""


def _derive(task: Task, info: ModelInfo, adapter: str = "full") -> Path:
    """The derived repo of (frozen repo, model, adapter), made once: copy, byom/, the family's prepare step."""
    lora = "-lora" if adapter == "lora" else ""
    dest = CACHE_ROOT / task.name / f"{tree_sha256(task.repo)[:16]}-{info.sha256[:16]}{lora}" / "repo"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.with_name("repo.lock")):  # processes deriving it at once: one does, the rest reuse it
        return dest if dest.is_dir() else _derive_locked(task, info, dest, adapter)


def _derive_locked(task: Task, info: ModelInfo, dest: Path, adapter: str = "full") -> Path:
    tmp = dest.with_name("repo.partial")
    if tmp.exists():
        make_writable(tmp)
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    say(f"preparing {task.name} on your model {info.architecture} ({info.n_params:,} parameters) -> {dest} (once)")
    copy_repo(task, tmp)
    own = tmp / "byom"
    (own / "model").mkdir(parents=True)
    from transformers import AutoConfig, AutoTokenizer

    AutoConfig.from_pretrained(info.path, local_files_only=True).save_pretrained(own / "model")
    AutoTokenizer.from_pretrained(info.path, local_files_only=True).save_pretrained(own / "model")
    (own / "vocab.json").write_text(
        json.dumps(
            {
                "token_ids": info.token_ids,
                "symbols": info.symbols,
                "vocab_size": info.vocab_size,
                "source_sha256": info.sha256,
            },
            indent=1,
        )
        + "\n"
    )
    if adapter == "lora":  # the repo's config.ADAPTER: train.py trains a LoRA adapter (README "Your own model")
        (own / "adapter.json").write_text(json.dumps({"adapter": "lora"}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    threads = str(max(task.scale(s).threads for s in task.scales))
    env.update(
        PYTHONPATH=str(tmp),
        PYTHONDONTWRITEBYTECODE="1",
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    argv = [python_executable(), "prepare.py", "--own-model", info.path]
    if task.name in ON_DEVICE:
        import torch

        argv += ["--device", "cuda" if torch.cuda.is_available() else "cpu"]
    hidden = None
    if task.artifacts is not None and task.artifacts.data_function:
        # what the repo's prepare step reads, written by the hidden grader (unlearning: every fact, the
        # held-out ones included): beside the derived repo, never inside it, and gone once prepare is done
        hidden = tmp.parent / "prepare_data"
        if hidden.exists():
            shutil.rmtree(hidden)
        getattr(load_grader(task.name, task.grader), task.artifacts.data_function)(hidden)
        argv += ["--data", str(hidden)]
    try:
        r = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S)
    finally:
        if hidden is not None:
            shutil.rmtree(hidden, ignore_errors=True)
    (tmp.parent / "prepare.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
        raise RuntimeError(
            f"{task.name}: prepare.py --own-model failed (exit {r.returncode}): "
            f"{lines[-1] if lines else 'no output'}; log in {tmp.parent / 'prepare.log'}"
        )
    count = subprocess.run(
        [python_executable(), "-c", COUNT], cwd=tmp, env=env, capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S
    )
    if count.returncode != 0:
        raise RuntimeError(f"{task.name}: model.build_model fails on your model: {count.stderr.strip()[-300:]}")
    info = replace(info, n_params=int(count.stdout.split()[-1]))
    (tmp.parent / "n_params").write_text(f"{info.n_params}\n")
    (own / "MODEL.md").write_text(describe(info).lstrip())
    with open(tmp / "README.md", "a") as f:
        f.write(describe(info))
        if adapter == "lora":
            f.write(
                "\nThis copy trains a LoRA adapter on it (task.adapter=lora, `byom/adapter.json`, "
                '`config.ADAPTER`): see "Your own model" above for what that changes.\n'
            )
    for p in own.rglob("*"):  # safetensors writes 0600: the sandbox's user must read what prepare made
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    tmp.rename(dest)
    return dest


def resolve_adapter(task: Task, n_params: int, gpu_bytes: int | None = None) -> str:
    """The adapter a brought model trains with: task.adapter, with `auto` made "lora" where the repo
    can train one and the model is large (LORA_FROM_PARAMS) or full fine-tuning would take more than
    half of the GPU's memory (gpu_bytes; None: this machine's first GPU, or no GPU), else "full". A
    "lora" the task's repo cannot train is refused (one line)."""
    if task.adapter == "lora" and task.name not in ADAPTER_TASKS:
        raise ModelPathError(
            task.model_path,
            f"task.adapter=lora: the {task.name} repo does not fine-tune your model; a LoRA adapter is "
            f"trained by {', '.join(ADAPTER_TASKS[:-1])} and {ADAPTER_TASKS[-1]} (use task.adapter=full or auto here)",
        )
    if task.adapter != "auto":
        return task.adapter
    if task.name not in ADAPTER_TASKS:
        return "full"
    if gpu_bytes is None:
        import torch

        gpu_bytes = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 0
    too_big = n_params >= LORA_FROM_PARAMS or (gpu_bytes > 0 and FULL_FINETUNE_BYTES * n_params > gpu_bytes / 2)
    return "lora" if too_big else "full"


def with_model(task: Task) -> Task:
    """The task on its model: unchanged when task.model_path is unset; else checked (ModelPathError),
    prepared once (the derived repo, per adapter) and recorded in grader_hidden/<task>/models.yaml, with
    `repo` the derived repo and each scale's n_params the model's."""
    if not task.model_path:
        if task.adapter == "lora":
            raise TaskError(
                "task.adapter=lora applies to a model you bring (task.model_path=FOLDER); the repo's own "
                "model trains every weight"
            )
        return task
    if CACHE_ROOT in Path(task.repo).parents:  # already derived
        return task
    info = check_model_path(task)
    adapter = resolve_adapter(task, info.n_params)
    repo = _derive(task, info, adapter)
    info = replace(info, n_params=int((repo.parent / "n_params").read_text()))
    derived = replace(
        task,
        repo=repo,
        adapter=adapter,
        artifacts=task.artifacts if task.name in KEEP_REPO_ARTIFACTS else None,
        description=f"{task.description} This copy trains your own model: {info.architecture}, "
        f"{info.n_params:,} parameters, a vocabulary of {info.vocab_size:,}"
        f"{', with a LoRA adapter' if adapter == 'lora' else ''} (README).",
        scales={s: replace(b, n_params=info.n_params) for s, b in task.scales.items()},
        base_task=replace(task, model_path=None),
    )
    register(derived, info, frozen_repo=repo.parent.name.split("-")[0])
    return derived


def token_maps(model, device):
    """For a hidden grader: (task ids -> model ids, model ids -> task ids), on tensors. The identity
    for a repo's own model; a model brought with task.model_path carries `task_token_ids` (set by the
    pristine repo's build_model): prompts go in through it, and a generated token that is no task
    token reads as -1."""
    table = getattr(model, "task_token_ids", None)
    if table is None:
        return (lambda t: t), (lambda t: t)
    import torch

    fwd = torch.tensor(table, dtype=torch.int64, device=device)
    back = torch.full(
        (max(int(model.get_output_embeddings().weight.shape[0]), max(table) + 1),), -1, dtype=torch.int64, device=device
    )
    for task_id, model_id in enumerate(table):  # a model id shared by two task tokens (<bos> = <eos>)
        back[model_id] = task_id  # reads as the later one: <eos>
    return (lambda t: fwd[t]), (lambda t: back[t])


def provenance_record(task: Task) -> dict | None:
    """What result.json should say of the model a run trained (None: the repo's own): for
    pipeline.build_result's provenance, so a reader (and an audit) knows which model it was."""
    if not task.model_path:
        return None
    info = (
        json.loads((Path(task.repo) / "byom" / "vocab.json").read_text())
        if (Path(task.repo) / "byom" / "vocab.json").exists()
        else {}
    )
    return {
        "path": str(task.model_path),
        "adapter": "lora" if (Path(task.repo) / "byom" / "adapter.json").exists() else "full",
        "sha256": info.get("source_sha256") or model_sha256(task.model_path),
        "n_params": task.scale(next(iter(task.scales))).n_params,
        "vocab_size": info.get("vocab_size"),
    }
