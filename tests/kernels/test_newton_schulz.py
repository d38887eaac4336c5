import pytest
import torch

from ai4ai_kernels import Muon, newton_schulz, newton_schulz_reference

DTYPES = [
    pytest.param((torch.float32, 1e-4, 1e-4), id="fp32"),
    # bf16 storage between matmuls; the kernel rounds once per fused epilogue, torch once per op
    pytest.param((torch.bfloat16, 6e-2, 5e-2), id="bf16"),
]
SHAPES = [(1, 50), (33, 70), (64, 96), (3, 40, 24)]  # one row; odd; wide; batched and tall


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_reference_and_orthogonalises(shape, dtype_tol):
    dtype, atol, rtol = dtype_tol
    G = torch.randn(shape).to(dtype)
    out = newton_schulz(G)
    ref = newton_schulz_reference(G)
    assert out.shape == G.shape and out.dtype == dtype
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # the quintic iteration maps singular values into about [0.68, 1.13], not exactly 1
    s = torch.linalg.svdvals(out.float())
    assert s.min() > 0.6 and s.max() < 1.25
    # and keeps the singular vectors: out = U f(S) V^T, so |out - U V^T| <= max |f(s) - 1|
    U, _, Vh = torch.linalg.svd(G.float(), full_matrices=False)
    torch.testing.assert_close(out.float(), U @ Vh, atol=0.35, rtol=0)


def test_transpose_equivariant():
    G = torch.randn(20, 36)
    torch.testing.assert_close(newton_schulz(G.T), newton_schulz(G).T, atol=1e-5, rtol=1e-5)


def test_muon_steps_match_a_hand_written_update():
    torch.manual_seed(1)
    W = torch.nn.Parameter(torch.randn(48, 32))
    W_ref = W.detach().clone()
    opt = Muon([W], lr=0.05, momentum=0.9, weight_decay=0.01, ns_dtype=torch.float32)
    buf = torch.zeros_like(W_ref)
    for _ in range(3):
        g = torch.randn(48, 32)
        W.grad = g.clone()
        opt.step()
        buf = 0.9 * buf + g
        u = g + 0.9 * buf  # nesterov
        o = newton_schulz_reference(u) * (48 / 32) ** 0.5
        W_ref = W_ref * (1 - 0.05 * 0.01) - 0.05 * o
    torch.testing.assert_close(W.detach(), W_ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        b = torch.nn.Parameter(torch.ones(4))
        b.grad = torch.ones(4)
        Muon([b]).step()


@pytest.mark.parametrize(
    "shape,tiles", [((33, 70), (16, 16, 16)), ((3, 40, 24), (16, 16, 16)), ((64, 96), (64, 64, 32))], ids=str
)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_multi_tile_matmul(blocks, shape, tiles, dtype_tol):
    dtype, atol, rtol = dtype_tol
    blocks(matmul=tiles)  # several output tiles and K steps, partial tiles at the edges
    G = torch.randn(shape).to(dtype)
    torch.testing.assert_close(newton_schulz(G).float(), newton_schulz_reference(G).float(), atol=atol, rtol=rtol)
