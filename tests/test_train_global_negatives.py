"""All-rank contrastive negatives on 2 real gloo processes against a brute-force InfoNCE over
the concatenated global batch."""

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ems.losses import contrastive_loss, global_contrastive_loss
from tests.conftest import leave_spawned_rank

B, K, TEMPERATURE, MARGIN = 3, 4, 0.1, 0.2


def global_embeddings() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(2 * B, K, generator=g, dtype=torch.float64), torch.randn(
        2 * B, K, generator=g, dtype=torch.float64
    )


def _rank(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    u, v = global_embeddings()
    h_u = u[rank * B : (rank + 1) * B].clone().requires_grad_()
    h_v = v[rank * B : (rank + 1) * B].clone().requires_grad_()
    per_pair = global_contrastive_loss(h_u, h_v, TEMPERATURE)
    per_pair.mean().backward()
    np.save(f"{out_dir}/loss{rank}.npy", per_pair.detach().numpy())
    with torch.no_grad():  # the margin's gold column is this rank's rows of the global batch
        np.save(f"{out_dir}/margin{rank}.npy", global_contrastive_loss(h_u, h_v, TEMPERATURE, margin=MARGIN).numpy())
    np.save(f"{out_dir}/grad{rank}.npy", h_u.grad.numpy())
    dist.destroy_process_group()
    leave_spawned_rank()


def brute_force_infonce(u: np.ndarray, v: np.ndarray, t: float, margin: float = 0.0) -> np.ndarray:
    """Per pair i: -log softmax_j((cos(u_i, v_j) - margin [j = i])/t)[i], plus the same from v_i."""
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    loss = np.zeros(len(u))
    for i in range(len(u)):
        for a, b in ((u, v), (v, u)):
            scores = np.array([a[i] @ b[j] - (margin if j == i else 0.0) for j in range(len(u))]) / t
            loss[i] += np.log(np.exp(scores).sum()) - scores[i]
    return loss


def test_global_negatives_give_the_global_batch_loss_and_gradients(tmp_path):
    mp.start_processes(_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, start_method="spawn")
    u, v = global_embeddings()
    expected = brute_force_infonce(u.numpy(), v.numpy(), TEMPERATURE)
    losses = np.concatenate([np.load(tmp_path / f"loss{r}.npy") for r in range(2)])
    np.testing.assert_allclose(losses, expected, rtol=1e-6)  # the losses compute in float32
    with_margin = np.concatenate([np.load(tmp_path / f"margin{r}.npy") for r in range(2)])
    np.testing.assert_allclose(with_margin, brute_force_infonce(u.numpy(), v.numpy(), TEMPERATURE, MARGIN), rtol=1e-6)
    # each rank's mean loss backpropagates through the gather: the gradients summed over ranks
    # reach every rank's rows; with DeepSpeed's average over ranks that is the gradient of the
    # global mean loss, i.e. rank r's .grad = 2 x d(global mean)/d(its rows)
    u_all = u.clone().requires_grad_()
    contrastive_loss(u_all, v, TEMPERATURE).mean().backward()
    grads = np.concatenate([np.load(tmp_path / f"grad{r}.npy") for r in range(2)])
    np.testing.assert_allclose(grads, 2 * u_all.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert np.abs(grads).min() > 0
    # and the local-negatives loss of rank 0's rows differs (3 candidates instead of 6)
    local = contrastive_loss(u[:B], v[:B], TEMPERATURE).numpy()
    assert np.all(local < losses[:B])


def test_a_world_of_one_is_the_in_batch_loss():
    u, v = global_embeddings()
    torch.testing.assert_close(global_contrastive_loss(u, v, TEMPERATURE), contrastive_loss(u, v, TEMPERATURE))
