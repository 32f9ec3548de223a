"""tree.sample_target_only with one coin for every node of a request (our Torch kernel fed the root's coin
everywhere): each acceptance is still right on its own, the chain of them is not independent."""
from specverify.kernels.torch.tree import sample_target_only as ours


def sample_target_only(**kw):
    coins = kw["uniform_samples"]
    ours(**{**kw, "uniform_samples": coins[:, :1].expand_as(coins).contiguous()})
