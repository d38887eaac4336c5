import pytest
import torch

from ai4ai_kernels import FusedAdamW, adamw_step, adamw_step_reference

SHAPES = [(1,), (1023,), (33, 70), (4, 8, 16)]
HPARAMS = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def _params(dtype=torch.float32):
    return [torch.nn.Parameter(torch.randn(s).to(dtype)) for s in SHAPES]


def _set_grads(groups_of_params, k):
    gen = torch.Generator().manual_seed(k)
    for i, p in enumerate(groups_of_params[0]):
        g = torch.randn(p.shape, generator=gen, device="cpu") * (i + 1)  # a CPU generator on any test device
        for params in groups_of_params:
            params[i].grad = g.to(params[i].device, params[i].dtype)


def test_matches_torch_adamw_over_steps():
    ours, theirs = _params(), _params()
    for a, b in zip(ours, theirs):
        b.data.copy_(a.data)
    # two groups with different hyper-parameters, as a trainer would use for decay / no decay
    opt = FusedAdamW([{"params": ours[:2], "weight_decay": 0.0}, {"params": ours[2:]}], **HPARAMS)
    ref = torch.optim.AdamW([{"params": theirs[:2], "weight_decay": 0.0}, {"params": theirs[2:]}], **HPARAMS)
    for k in range(6):
        _set_grads([ours, theirs], k)
        opt.step()
        ref.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        sa, sb = opt.state[a], ref.state[b]
        assert sa["step"] == int(sb["step"]) == 6
        torch.testing.assert_close(sa["exp_avg"], sb["exp_avg"], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], atol=1e-6, rtol=1e-5)


def test_bf16_params_with_fp32_master_track_an_fp32_run():
    ours = _params(torch.bfloat16)
    fp32 = [torch.nn.Parameter(p.detach().float()) for p in ours]  # same starting point
    opt = FusedAdamW(ours, master_weights=True, **HPARAMS)
    ref = torch.optim.AdamW(fp32, **HPARAMS)
    for k in range(5):
        _set_grads([fp32, ours], k)  # identical bf16-representable grads
        for p in fp32:
            p.grad = p.grad.bfloat16().float()
        opt.step()
        ref.step()
    for p, q in zip(ours, fp32):
        master = opt.state[p]["master"]
        assert p.dtype == torch.bfloat16 and master.dtype == torch.float32
        torch.testing.assert_close(master, q.detach(), atol=1e-6, rtol=1e-5)
        # param = master rounded to bf16: to nearest on a GPU, truncated by the interpreter
        assert ((p.detach().float() - master).abs() <= master.abs() * 2**-7).all()


def test_bf16_params_without_master_stay_close():
    ours = _params(torch.bfloat16)
    fp32 = [torch.nn.Parameter(p.detach().float()) for p in ours]
    opt, ref = FusedAdamW(ours, **HPARAMS), torch.optim.AdamW(fp32, **HPARAMS)
    for k in range(3):
        _set_grads([fp32, ours], k)
        opt.step()
        ref.step()
    for p, q in zip(ours, fp32):
        torch.testing.assert_close(p.float(), q.detach(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("with_master", [False, True])
def test_functional_step_on_flat_buffer_matches_reference(with_master):
    n = 5000  # not a multiple of any block size
    dtype = torch.bfloat16 if with_master else torch.float32
    p = torch.randn(n).to(dtype)
    state = [t.clone() for t in (p, torch.zeros(n), torch.rand(n))]
    master = [p.float()] if with_master else None
    state_ref = [t.clone() for t in state]
    master_ref = [p.float()] if with_master else None
    for step in range(1, 4):
        g = torch.randn(n).to(dtype)
        kw = dict(step=step, lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.05)
        adamw_step([state[0]], [g], [state[1]], [state[2]], master_params=master, **kw)
        adamw_step_reference([state_ref[0]], [g], [state_ref[1]], [state_ref[2]], master_params=master_ref, **kw)
    # a bf16 param may differ by one rounding (the interpreter truncates, torch rounds to nearest)
    torch.testing.assert_close(state[0], state_ref[0], atol=1e-6, rtol=2**-7 if with_master else 1e-5)
    for a, b in zip(state[1:], state_ref[1:]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    if with_master:
        torch.testing.assert_close(master[0], master_ref[0], atol=1e-6, rtol=1e-5)


def test_skips_params_without_grad_and_validates():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    opt = FusedAdamW([a, b], lr=0.1)
    a.grad = torch.ones(3)
    opt.step()
    assert (a < 1).all() and torch.equal(b.detach(), torch.ones(3)) and b not in opt.state
    with pytest.raises(ValueError):
        FusedAdamW([a], lr=-1.0)


def test_many_programs_per_tensor(blocks):
    blocks(flat=1024)  # the GPU block: a 5000-element tensor takes 5 programs, the last partial
    test_functional_step_on_flat_buffer_matches_reference(with_master=True)
    test_matches_torch_adamw_over_steps()
